//! What the workspace's test suites share (a dev-dependency only).
//!
//! [`fixture`]: a store written the way ingest writes it, from random
//! events, with brute-force answers over the same events.
//!
//! [`promql`]: varied PromQL queries over the fixture's events, and their
//! brute-force answers.
//!
//! [`sources`]: the workspace's own sources, for tests that read the code.
//!
//! [`throttled`]: a table that throttles some reads of a partition.
//!
//! [`http_get`]: one request to a server a test started on loopback.
//!
//! [`promtool_check_metrics`]: a scrape checked by Prometheus's own
//! linter.
//!
//! [`Reaped`]: a child process killed and waited for when dropped. std's
//! `Child` is neither on drop, so a test that panicked between spawning a
//! worker and waiting for it left the worker running (seen: debug `ingest`
//! workers still retrying an hour after a failed run).

pub mod fixture;
pub mod promql;
pub mod sources;
pub mod throttled;

use std::io::{self, BufRead, BufReader};
use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};
use std::process::{Child, Command, Output, Stdio};

/// A child process that cannot outlive its owner.
#[derive(Debug)]
pub struct Reaped(Option<Child>);

impl Reaped {
    pub fn spawn(command: &mut Command) -> io::Result<Reaped> {
        command.spawn().map(|child| Reaped(Some(child)))
    }

    /// Waits for it to exit, with what it wrote to piped stdout and stderr.
    pub fn wait_with_output(mut self) -> io::Result<Output> {
        self.0.take().expect("present until consumed").wait_with_output()
    }
}

/// Runs `promtool check metrics` on a scrape's text: Err with what it
/// says when it finds a problem; Ok(false) when promtool is not installed
/// (a failure under `ZIGZAG_REQUIRE_EMULATORS=1`, which `test.sh` sets after
/// installing it).
pub fn promtool_check_metrics(body: &str) -> Result<bool, String> {
    use std::io::Write;
    let installed = Command::new("promtool").arg("--version").output().is_ok_and(|o| o.status.success());
    if !installed {
        if std::env::var("ZIGZAG_REQUIRE_EMULATORS").is_ok_and(|v| v == "1") {
            return Err("promtool is not installed".into());
        }
        eprintln!("skipped promtool check metrics: promtool not installed");
        return Ok(false);
    }
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    child.stdin.take().expect("piped").write_all(body.as_bytes()).map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    match out.status.success() {
        true => Ok(true),
        false => Err(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))),
    }
}

/// One HTTP/1.0 GET on loopback: the status and the body.
pub fn http_get(addr: SocketAddr, path: &str) -> io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(5))?;
    conn.set_read_timeout(Some(std::time::Duration::from_secs(60)))?;
    conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer)?;
    let status = answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

/// A server that says where it listens on its first line of stderr
/// (`... http://ADDR/...`, as `gather serve` does): spawned, its address
/// read, the rest of its log drained (a full pipe would stall it).
pub fn spawn_listening(command: &mut Command) -> io::Result<(Reaped, SocketAddr)> {
    let mut child = Reaped::spawn(command.stdout(Stdio::null()).stderr(Stdio::piped()))?;
    let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
    let first = lines.next().transpose()?.unwrap_or_default();
    std::thread::spawn(move || for _ in lines {});
    let addr = first.split("http://").nth(1).and_then(|r| r.split('/').next()).unwrap_or_default();
    let addr = addr.parse().map_err(|_| io::Error::other(format!("no address in its first line: {first:?}")))?;
    Ok((child, addr))
}

impl From<Child> for Reaped {
    fn from(child: Child) -> Self {
        Reaped(Some(child))
    }
}

impl Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.0.as_ref().expect("present until consumed")
    }
}

impl DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("present until consumed")
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            // Exited already (the usual case) or not: either way reaped.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn alive(pid: u32) -> bool {
        // Reaped children are gone from /proc; zombies would still be there.
        std::path::Path::new(&format!("/proc/{pid}")).exists()
    }

    #[test]
    fn a_child_dropped_mid_test_is_killed_and_reaped() {
        let child = Reaped::spawn(Command::new("sleep").arg("30")).expect("sleep runs");
        let pid = child.id();
        assert!(alive(pid));
        let panicked = std::panic::catch_unwind(move || {
            let _held = child;
            panic!("a failing assertion while the worker runs");
        });
        assert!(panicked.is_err());
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alive(pid), "the child outlived the panic");
    }

    #[test]
    fn output_is_still_read_to_the_end() {
        let mut echo = Command::new("echo");
        echo.arg("done").stdout(std::process::Stdio::piped());
        let out = Reaped::spawn(&mut echo).expect("echo runs").wait_with_output().expect("waited");
        assert!(out.status.success());
        assert_eq!(out.stdout, b"done\n");
    }
}
