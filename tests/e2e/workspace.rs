//! Build settings the behaviour depends on.

/// cargo-lambda's `--release` adds `profile.release.panic="abort"` unless the workspace sets
/// `panic` itself; with abort, one panicking record would kill the whole runtime process
/// instead of being reported as that record's failure.
#[test]
fn release_profile_keeps_unwinding() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"))
        .expect("workspace Cargo.toml");
    let section: Vec<&str> = manifest
        .lines()
        .skip_while(|l| l.trim() != "[profile.release]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .map(str::trim)
        .collect();
    assert!(
        section.contains(&"panic = \"unwind\""),
        "[profile.release] must set panic = \"unwind\"; found {section:?}"
    );
}
