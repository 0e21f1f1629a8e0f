//! The mark a writer lane leaves on an aggregate item: attribute
//! `w@<lane>` = the number of that lane's last flush applied to the item.
//! An update carrying the mark applies only if the item's mark is below its
//! flush number, so a flush re-applied after a crash is skipped where it
//! already landed (the lease protocol's exactly-once, docs/design/exactly-once.md). The
//! format is written here only; `@` keeps it apart from every declared name
//! (names are letters, digits and `_`).

const PREFIX: &str = "w@";

/// The mark attribute of `lane`.
pub fn mark_attr(lane: u32) -> String {
    format!("{PREFIX}{lane}")
}

/// Whether an attribute name is a lane's mark.
pub fn is_mark(attr: &str) -> bool {
    attr.starts_with(PREFIX)
}

/// The lane whose mark an attribute is.
pub fn mark_lane(attr: &str) -> Option<u32> {
    attr.strip_prefix(PREFIX)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_names_its_lane_and_nothing_else_is_one() {
        assert_eq!(mark_attr(17), "w@17");
        assert_eq!(mark_lane(&mark_attr(17)), Some(17));
        assert!(is_mark("w@0") && !is_mark("w") && !is_mark("clicks"));
        assert_eq!(mark_lane("w@x"), None);
    }
}
