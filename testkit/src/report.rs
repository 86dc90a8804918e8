//! Reading a lock report's one-line text in tests.

/// What a report's line says of `node`: the words after the names of the
/// nodes that share them (`a, b: failed (...)`; `c: timed out`). Panics
/// when `node` is not named.
pub fn said_of<'t>(text: &'t str, node: &str) -> &'t str {
    let at = text
        .find(&format!("{node}:"))
        .or_else(|| text.find(&format!("{node},")))
        .unwrap_or_else(|| panic!("{node} is not named in {text}"));
    let rest = &text[at..];
    &rest[rest.find(": ").unwrap_or_else(|| panic!("{text}")) + 2..]
}
