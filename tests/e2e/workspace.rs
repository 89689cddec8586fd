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

/// Whether `name` is defined in `source`: an item (`fn`, `struct`, `enum`, `type`, `const`,
/// `trait`, `static`, `mod`), an enum variant, or a type whose `impl` block is there.
fn defines(source: &str, name: &str) -> bool {
    let item = [
        "fn", "struct", "enum", "type", "const", "trait", "static", "mod",
    ]
    .iter()
    .any(|kind| {
        source
            .match_indices(&format!("{kind} {name}"))
            .any(|(i, m)| {
                let next = source[i + m.len()..].chars().next();
                !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
    });
    let variant = source.lines().any(|l| {
        let l = l.trim_start();
        l.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with([',', ' ', '(', '{']) || rest.is_empty())
    });
    let implemented = source.lines().any(|l| {
        l.starts_with("impl")
            && l.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|word| word == name)
    });
    item || variant || implemented
}

/// docs/design.md maps every rule to the `file::function` that holds it: each one named there
/// exists, so the map cannot drift from the code.
#[test]
fn the_design_rule_map_names_real_code() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let design = std::fs::read_to_string(root.join("docs/design.md")).expect("docs/design.md");
    let map = design
        .split("## Rule map")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a Rule map section");
    let mut checked = 0;
    let mut missing = Vec::new();
    for token in map.split('`').skip(1).step_by(2) {
        let Some((path, names)) = token.split_once(".rs::") else {
            continue;
        };
        let file = format!("{path}.rs");
        let Ok(source) = std::fs::read_to_string(root.join(&file)) else {
            missing.push(format!("{token}: no file {file}"));
            continue;
        };
        for name in names.split("::") {
            let name = name.trim_end_matches("()");
            checked += 1;
            if !defines(&source, name) {
                missing.push(format!("{token}: {name} is not in {file}"));
            }
        }
    }
    assert!(checked > 100, "only {checked} names read from the rule map");
    assert!(
        missing.is_empty(),
        "docs/design.md names code that is not there:\n{}",
        missing.join("\n")
    );
}

/// The normal dependencies of `packages` (as `cargo lambda build` builds the functions), as
/// `cargo tree` prints them.
fn dependencies(packages: &[&str]) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cargo = std::process::Command::new(env!("CARGO"));
    cargo
        .current_dir(&root)
        .args(["tree", "--offline", "-e", "normal", "--prefix", "none"]);
    for p in packages {
        cargo.args(["-p", p]);
    }
    let out = cargo.output().expect("cargo tree runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The in-memory doubles are a crate of their own (resq-testing): the functions' own build
/// never depends on it (the bench's does, which shows the check can see it).
#[test]
fn the_shipped_functions_carry_no_test_doubles() {
    let doubles = "resq-testing v";
    let shipped = dependencies(&["resq-consumer", "resq-redriver"]);
    assert!(shipped.contains("resq v"), "{shipped}");
    assert!(!shipped.contains(doubles), "{shipped}");
    assert!(dependencies(&["resq-bench"]).contains(doubles));
}
