//! The configuration's error: what every part of the model says when a
//! declaration cannot be used (its own module, so the parts that check
//! declarations need not import the configuration that assembles them).

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ConfigError {
    // The message is the error's own: not its source too, or it is said twice.
    #[error("configuration TOML: {0}")]
    Toml(toml::de::Error),
    #[error("configuration: {0}")]
    Invalid(String),
}
