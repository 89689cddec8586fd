//! The docs a reader follows: `README.md` and the book (`docs/`, built by mdBook). Every
//! relative link and `#anchor` resolves to a file and a heading (by mdBook's heading ids), every
//! `{{#include}}` finds its file and anchor, every chapter is in `SUMMARY.md`, and every shell
//! snippet is either run here or marked illustrative (docs/development.md, "Writing the docs").

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};
use resq_e2e::{function_binary, workspace_root};

/// Fence languages that are shell: a snippet in one of them is run, unless marked. (A
/// `console` fence is a transcript, prompts and output, so it is never run.)
const SHELLS: [&str; 3] = ["sh", "bash", "shell"];
/// The fence word that marks a shell snippet as not run (it needs AWS, a stack, minutes).
const ILLUSTRATIVE: &str = "illustrative";
/// How deep mdBook follows an include inside an include.
const MAX_INCLUDE_DEPTH: usize = 10;

/// mdBook 0.5's markdown options (mdbook-markdown: tables, footnotes, strikethrough, task lists,
/// heading attributes, smart punctuation), so headings read as its renderer reads them.
fn mdbook_options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_HEADING_ATTRIBUTES
        | Options::ENABLE_SMART_PUNCTUATION
}

/// A page of the docs as a reader gets it: its includes expanded as mdBook expands them.
struct Page {
    /// The page's path from the workspace root (`README.md`, `docs/deploy.md`).
    path: PathBuf,
    text: String,
    /// The includes that did not resolve (left as written, as mdBook leaves them).
    include_errors: Vec<String>,
}

/// What a page holds that the checks look at.
#[derive(Default)]
struct Parsed {
    /// Heading ids, as mdBook gives them.
    ids: BTreeSet<String>,
    /// Link and image destinations, with their line.
    links: Vec<(usize, String)>,
    /// Fenced code blocks.
    blocks: Vec<Block>,
}

/// A fenced code block.
struct Block {
    line: usize,
    /// The info string's words: the language first (mdBook splits on spaces, tabs and commas).
    words: Vec<String>,
    code: String,
}

/// The pages: `README.md`, then every `docs/*.md` in name order.
fn doc_paths(root: &Path) -> Vec<PathBuf> {
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| p.strip_prefix(root).expect("under the root").to_path_buf())
        .collect();
    chapters.sort();
    let mut paths = vec![PathBuf::from("README.md")];
    paths.extend(chapters);
    paths
}

/// `path` with `.` and `..` resolved lexically (the target may not exist).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// The lines of `text` between `ANCHOR: name` and `ANCHOR_END: name`, less any anchor lines,
/// as mdBook takes them; `None` when there is no such anchor.
fn anchored_lines(text: &str, name: &str) -> Option<String> {
    let marker = |line: &str, tag: &str| -> Option<String> {
        let rest = line.split(tag).nth(1)?.trim_start();
        let word: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '-')
            .collect();
        (!word.is_empty()).then_some(word)
    };
    let mut kept = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let end = marker(line, "ANCHOR_END:");
        let start = marker(line, "ANCHOR:");
        if inside {
            if end.as_deref() == Some(name) {
                return Some(kept.join("\n"));
            }
            if end.is_none() && start.is_none() {
                kept.push(line);
            }
        } else if start.as_deref() == Some(name) {
            inside = true;
        }
    }
    // mdBook takes an anchor without its end to the end of the file
    inside.then(|| kept.join("\n"))
}

/// What an include spec (`FILE`, `FILE:ANCHOR`, `FILE:N`, `FILE:N:`, `FILE::M`, `FILE:N:M`,
/// lines counted from 1) takes of `text`, as mdBook's `take_lines` and `take_anchored_lines` do.
fn take(text: &str, spec: Option<&str>) -> Result<String, String> {
    let Some(spec) = spec else {
        return Ok(text.to_owned());
    };
    let mut parts = spec.splitn(2, ':');
    let first = parts.next().unwrap_or("");
    let start = match first.parse::<usize>() {
        Ok(n) => n.saturating_sub(1),
        Err(_) if first.is_empty() => 0,
        Err(_) => {
            return anchored_lines(text, first)
                .filter(|t| !t.trim().is_empty())
                .ok_or_else(|| {
                    format!("no ANCHOR: {first} … ANCHOR_END: {first} with text in it")
                });
        }
    };
    let end = match parts.next() {
        None if !first.is_empty() => Some(start + 1),
        None => None,
        Some(e) => e.parse::<usize>().ok(),
    };
    let lines = text.lines().skip(start);
    let taken: Vec<&str> = match end {
        Some(end) => lines.take(end.saturating_sub(start)).collect(),
        None => lines.collect(),
    };
    Ok(taken.join("\n"))
}

/// `text` (of the file at `dir`/…) with its `{{#include …}}`s expanded as mdBook's links
/// preprocessor expands them (`\{{#…}}` is an escaped one, kept without the backslash). An
/// include whose file or anchor is missing is left as written and added to `errors` (mdBook
/// only logs those, and an anchor it cannot find includes nothing).
fn expand(root: &Path, dir: &Path, text: &str, depth: usize, errors: &mut Vec<String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("{{") {
        if at > 0 && rest[..at].ends_with('\\') && rest[at + 2..].starts_with('#') {
            // escaped: mdBook matches `\{{#.*}}` to the last `}}` on the line, drops the `\`
            let line_end = rest[at..].find('\n').map_or(rest.len(), |n| at + n);
            let Some(close) = rest[at..line_end].rfind("}}") else {
                out.push_str(&rest[..at + 2]);
                rest = &rest[at + 2..];
                continue;
            };
            out.push_str(&rest[..at - 1]);
            out.push_str(&rest[at..at + close + 2]);
            rest = &rest[at + close + 2..];
            continue;
        }
        let after = rest[at + 2..].trim_start();
        let Some(body) = after.strip_prefix('#') else {
            out.push_str(&rest[..at + 2]);
            rest = &rest[at + 2..];
            continue;
        };
        let kind: String = body
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let args = &body[kind.len()..];
        let (Some(close), true) = (args.find('}'), args.starts_with(char::is_whitespace)) else {
            out.push_str(&rest[..at + 2]);
            rest = &rest[at + 2..];
            continue;
        };
        if !args[close..].starts_with("}}") || kind.is_empty() {
            out.push_str(&rest[..at + 2]);
            rest = &rest[at + 2..];
            continue;
        }
        let link = &rest[at..rest.len() - args.len() + close + 2];
        out.push_str(&rest[..at]);
        rest = &rest[at + link.len()..];
        if kind != "include" {
            errors.push(format!(
                "{link}: only {{{{#include}}}} is checked; use it or teach tests/e2e/docs.rs"
            ));
            out.push_str(link);
            continue;
        }
        if depth >= MAX_INCLUDE_DEPTH {
            errors.push(format!(
                "{link}: includes nested deeper than {MAX_INCLUDE_DEPTH}"
            ));
            out.push_str(link);
            continue;
        }
        let target = args[..close].split_whitespace().next().unwrap_or("");
        let (file, spec) = match target.split_once(':') {
            Some((f, s)) => (f, Some(s)),
            None => (target, None),
        };
        let path = normalize(&dir.join(file));
        let included = std::fs::read_to_string(root.join(&path))
            .map_err(|e| format!("{link}: cannot read {}: {e}", path.display()))
            .and_then(|t| take(&t, spec).map_err(|e| format!("{link}: {}: {e}", path.display())));
        match included {
            Ok(included) => {
                let inner_dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
                out.push_str(&expand(root, &inner_dir, &included, depth + 1, errors));
            }
            Err(e) => {
                errors.push(e);
                out.push_str(link);
            }
        }
    }
    out.push_str(rest);
    out
}

/// The page at `path`, its includes expanded.
fn read_page(root: &Path, path: &Path) -> Result<Page, String> {
    let raw =
        std::fs::read_to_string(root.join(path)).map_err(|e| format!("{}: {e}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut errors = Vec::new();
    let text = expand(root, dir, &raw, 0, &mut errors);
    Ok(Page {
        path: path.to_path_buf(),
        text,
        include_errors: errors
            .into_iter()
            .map(|e| format!("{}: {e}", path.display()))
            .collect(),
    })
}

/// A heading's id from its text, as mdBook 0.5 makes it (mdbook-html `id_from_content`):
/// trimmed, lower case, letters, digits, `_` and `-` kept, whitespace to `-`, the rest dropped.
fn id_from_content(content: &str) -> String {
    content
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c)
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// `id`, or `id-1`, `id-2`, … when a heading before it on the page has it (mdBook's `unique_id`).
fn unique_id(id: &str, used: &mut HashSet<String>) -> String {
    if used.insert(id.to_owned()) {
        return id.to_owned();
    }
    (1..)
        .map(|n| format!("{id}-{n}"))
        .find(|candidate| used.insert(candidate.clone()))
        .unwrap_or_default()
}

/// The headings, links and code blocks of a page's text.
fn parse(text: &str) -> Parsed {
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut parsed = Parsed::default();
    let mut used = HashSet::new();
    let mut heading: Option<(Option<String>, String)> = None;
    let mut block: Option<Block> = None;
    for (event, range) in Parser::new_ext(text, mdbook_options()).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { id, .. }) => {
                heading = Some((id.map(|i| i.to_string()), String::new()));
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some((given, content)) = heading.take() {
                    let id =
                        given.unwrap_or_else(|| unique_id(&id_from_content(&content), &mut used));
                    parsed.ids.insert(id);
                }
            }
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                parsed
                    .links
                    .push((line_of(range.start), dest_url.to_string()));
            }
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                block = Some(Block {
                    line: line_of(range.start),
                    words: info
                        .split([' ', '\t', ','])
                        .filter(|w| !w.is_empty())
                        .map(str::to_owned)
                        .collect(),
                    code: String::new(),
                });
            }
            Event::End(TagEnd::CodeBlock) => parsed.blocks.extend(block.take()),
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, content)) = heading.as_mut() {
                    content.push_str(&t);
                }
                if let Some(b) = block.as_mut() {
                    b.code.push_str(&t);
                }
            }
            _ => {}
        }
    }
    parsed
}

/// Whether a link's destination is a URL (`https:`, `mailto:`), not a path.
fn is_url(dest: &str) -> bool {
    dest.split_once(':').is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

/// Every broken relative link or anchor of the pages at `paths` (from `root`), each named with
/// its page and line; also every chapter `docs/SUMMARY.md` does not list, and every include
/// that does not resolve. An anchor is looked for in the page as the reader of the link sees
/// it: in the book, its includes expanded; from the README (read on GitHub), as written.
fn broken_links(root: &Path, paths: &[PathBuf]) -> Vec<String> {
    let mut broken = Vec::new();
    let mut ids: HashMap<(PathBuf, bool), Result<BTreeSet<String>, String>> = HashMap::new();
    let mut ids_of = |path: &Path, expanded: bool| -> Result<BTreeSet<String>, String> {
        ids.entry((path.to_path_buf(), expanded))
            .or_insert_with(|| {
                if expanded {
                    read_page(root, path).map(|p| parse(&p.text).ids)
                } else {
                    std::fs::read_to_string(root.join(path))
                        .map(|text| parse(&text).ids)
                        .map_err(|e| format!("{}: {e}", path.display()))
                }
            })
            .clone()
    };
    let mut summarized = BTreeSet::new();
    for path in paths {
        let page = match read_page(root, path) {
            Ok(page) => page,
            Err(e) => {
                broken.push(e);
                continue;
            }
        };
        broken.extend(page.include_errors.iter().cloned());
        let in_book = page.path.starts_with("docs");
        let dir = page.path.parent().unwrap_or(Path::new("")).to_path_buf();
        for (line, dest) in parse(&page.text).links {
            let at = format!("{}:{line}: ({dest})", page.path.display());
            if is_url(&dest) {
                continue;
            }
            let (file, anchor) = dest.split_once('#').unwrap_or((&dest, ""));
            if file.starts_with('/') {
                broken.push(format!(
                    "{at} an absolute path: make it relative to the page"
                ));
                continue;
            }
            let target = if file.is_empty() {
                page.path.clone()
            } else {
                normalize(&dir.join(file))
            };
            if page.path == Path::new("docs/SUMMARY.md") {
                summarized.insert(target.clone());
            }
            if in_book && !target.starts_with("docs") {
                broken.push(format!(
                    "{at} leaves the book ({}): the rendered book has no such page; name the file in a code span",
                    target.display()
                ));
                continue;
            }
            if target.starts_with("..") || !root.join(&target).exists() {
                broken.push(format!("{at} no file {}", target.display()));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            if target.extension().is_none_or(|x| x != "md") {
                broken.push(format!(
                    "{at} an anchor into {}, not a page",
                    target.display()
                ));
                continue;
            }
            match ids_of(&target, in_book) {
                Ok(found) if found.contains(anchor) => {}
                Ok(found) => broken.push(format!(
                    "{at} no heading with the id `{anchor}` in {}{} (its ids: {})",
                    target.display(),
                    if in_book {
                        ""
                    } else {
                        " as written (GitHub does not expand includes)"
                    },
                    found.into_iter().collect::<Vec<_>>().join(", ")
                )),
                Err(e) => broken.push(format!("{at} {e}")),
            }
        }
    }
    for path in paths.iter().filter(|p| p.starts_with("docs")) {
        if path != Path::new("docs/SUMMARY.md") && !summarized.contains(path) {
            broken.push(format!(
                "{}: not in docs/SUMMARY.md, so not in the book",
                path.display()
            ));
        }
    }
    broken
}

/// What becomes of a shell snippet, read from its fence's words.
#[derive(Debug, PartialEq)]
enum Fate {
    /// Not run: marked `illustrative`.
    Illustrative,
    /// Run; it must exit with this code (`exit=N`, else 0).
    Run { exit: i32 },
}

/// The fate of a shell block with these fence words (the language first); an unknown word is an
/// error, so a misspelt mark does not run the snippet by mistake or pass unnoticed.
fn fate(words: &[String]) -> Result<Fate, String> {
    let mut illustrative = false;
    let mut exit = 0;
    for word in words.iter().skip(1) {
        if word == ILLUSTRATIVE {
            illustrative = true;
        } else if let Some(code) = word.strip_prefix("exit=") {
            exit = code
                .parse()
                .map_err(|_| format!("`{word}`: exit=N takes a whole number"))?;
        } else {
            return Err(format!(
                "`{word}`: a shell fence takes only `{ILLUSTRATIVE}` or `exit=N`"
            ));
        }
    }
    Ok(if illustrative {
        Fate::Illustrative
    } else {
        Fate::Run { exit }
    })
}

#[test]
fn every_relative_link_anchor_and_include_in_the_docs_resolves() {
    // GIVEN the README and every chapter of the book
    let root = normalize(&workspace_root());
    let paths = doc_paths(&root);
    assert!(
        paths.contains(&PathBuf::from("docs/SUMMARY.md")) && paths.len() > 10,
        "the book's pages: {paths:?}"
    );
    // WHEN their links, anchors and includes are followed
    let broken = broken_links(&root, &paths);
    // THEN each reaches a file and a heading there
    assert!(
        broken.is_empty(),
        "broken links in the docs:\n{}",
        broken.join("\n")
    );
}

#[test]
fn every_shell_snippet_in_the_docs_runs_or_is_marked_illustrative() {
    // GIVEN every shell snippet of the README and the book, and the workspace's binaries
    let root = normalize(&workspace_root());
    let bin_dir = function_binary("resq")
        .parent()
        .expect("target/<profile>")
        .to_path_buf();
    function_binary("resq-local");
    let path = std::env::join_paths(
        std::iter::once(bin_dir.clone()).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )),
    )
    .expect("PATH");
    let mut seen = HashSet::new();
    let (mut ran, mut illustrative, mut failures) = (0, 0, Vec::new());
    for page in doc_paths(&root) {
        let page = read_page(&root, &page).unwrap_or_else(|e| panic!("{e}"));
        for block in parse(&page.text).blocks {
            let Some(lang) = block.words.first() else {
                continue;
            };
            if !SHELLS.contains(&lang.as_str()) {
                continue;
            }
            let at = format!("{}:{}", page.path.display(), block.line);
            let expected = match fate(&block.words) {
                Ok(Fate::Illustrative) => {
                    illustrative += 1;
                    continue;
                }
                Ok(Fate::Run { exit }) => exit,
                Err(e) => {
                    failures.push(format!("{at}: {e}"));
                    continue;
                }
            };
            // a README snippet a chapter includes runs once
            if !seen.insert((block.code.clone(), expected)) {
                continue;
            }
            // WHEN each one not marked illustrative runs from the root, offline
            let mut command = Command::new("bash");
            command
                .args(["-e", "-u", "-o", "pipefail", "-c", &block.code])
                .current_dir(&root)
                .env("PATH", &path);
            for (key, _) in std::env::vars_os() {
                let key = key.to_string_lossy().into_owned();
                if key.starts_with("AWS_")
                    || key.starts_with("RESQ_")
                    || ["MAIN_QUEUE_URL", "DLQ_URL", "ARCHIVE_BUCKET"].contains(&key.as_str())
                {
                    command.env_remove(key);
                }
            }
            command
                .env("AWS_CONFIG_FILE", "/dev/null")
                .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
                .env("AWS_EC2_METADATA_DISABLED", "true");
            let output = command.output().expect("run bash");
            ran += 1;
            // THEN it exits as documented
            let code = output.status.code();
            if code != Some(expected) {
                let tail = |bytes: &[u8]| {
                    let text = String::from_utf8_lossy(bytes);
                    let lines: Vec<&str> = text.lines().collect();
                    lines[lines.len().saturating_sub(15)..].join("\n")
                };
                failures.push(format!(
                    "{at}: exited {code:?}, documented {expected} (mark it `sh {ILLUSTRATIVE}` if it needs AWS, a stack or an emulator)\n{}\n--- stdout\n{}\n--- stderr\n{}",
                    block.code.trim_end(),
                    tail(&output.stdout),
                    tail(&output.stderr)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(
        ran > 0 && illustrative > 0,
        "ran {ran} snippets, {illustrative} illustrative: the docs have both kinds"
    );
    println!("docs: ran {ran} shell snippets; {illustrative} marked illustrative");
}

#[test]
fn heading_ids_are_mdbooks() {
    // GIVEN headings as mdBook's own tests of its ids have them, repeated, and with an id given
    let text = "# `--passes`: add more rustdoc passes\n\n## Method-call 🐙 expressions \u{1f47c}\n\n\
                ## Über\n\n## The queues' names -- and more\n\n## Über\n\n### Mine {#own-id}\n\n\
                ```sh\n# not a heading\n```\n";
    // WHEN the page is parsed
    let ids = parse(text).ids;
    // THEN the ids are mdBook's
    let expected: BTreeSet<String> = [
        "--passes-add-more-rustdoc-passes",
        "method-call--expressions-",
        "über",
        "über-1",
        "the-queues-names--and-more",
        "own-id",
    ]
    .map(String::from)
    .into();
    assert_eq!(ids, expected);
}

#[test]
fn a_broken_link_anchor_include_or_chapter_is_named() {
    // GIVEN a README and a book with one of each kind of break, and links that are fine
    let root = std::env::temp_dir().join(format!("resq-docs-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("docs")).expect("temp docs/");
    std::fs::create_dir_all(root.join("src")).expect("temp src/");
    let write = |path: &str, text: &str| std::fs::write(root.join(path), text).expect("write");
    write("src/lib.rs", "");
    write(
        "README.md",
        "# R\n<!-- ANCHOR: part -->\n## Shared\nshared [ok](docs/b.md#b-heading)\n\
         <!-- ANCHOR_END: part -->\n\
         [ok](docs/b.md) [ok](#r) [ok](src/lib.rs) [web](https://example.com/x#y)\n\
         [gone](docs/missing.md) [no heading](docs/b.md#nowhere) [github](docs/a.md#shared)\n\
         `[in code](docs/nothing.md)`\n",
    );
    write(
        "docs/SUMMARY.md",
        "# Summary\n\n- [B](b.md)\n- [A](a.md)\n- [C](c.md)\n",
    );
    write(
        "docs/a.md",
        "# A\n\n{{#include ../README.md:part}}\n\n[ok](b.md#b-heading) [ok](#a) [ok](#shared)\n\
         [outside](../src/lib.rs) [dup](b.md#b-heading-1)\n\\{{#include nothing.md}}\n",
    );
    write("docs/b.md", "# B heading\n\n## B heading\n");
    write("docs/c.md", "# C\n\n{{#include ../README.md:nope}}\n");
    write("docs/orphan.md", "# Orphan\n");
    let paths = doc_paths(&root);
    // WHEN the links are checked
    let broken = broken_links(&root, &paths);
    let _ = std::fs::remove_dir_all(&root);
    // THEN exactly the breaks are named, each with its page
    let named = |needle: &str| broken.iter().filter(|b| b.contains(needle)).count();
    assert_eq!(
        named("README.md:7: (docs/missing.md) no file"),
        1,
        "{broken:#?}"
    );
    assert_eq!(
        named("README.md:7: (docs/b.md#nowhere) no heading"),
        1,
        "{broken:#?}"
    );
    // (a README link included into a chapter is read from the chapter's folder)
    assert_eq!(
        named("docs/a.md:4: (docs/b.md#b-heading) no file docs/docs/b.md"),
        1,
        "{broken:#?}"
    );
    assert_eq!(
        named("docs/a.md:7: (../src/lib.rs) leaves the book"),
        1,
        "{broken:#?}"
    );
    assert_eq!(
        named("docs/c.md: {{#include ../README.md:nope}}"),
        1,
        "{broken:#?}"
    );
    assert_eq!(
        named("docs/orphan.md: not in docs/SUMMARY.md"),
        1,
        "{broken:#?}"
    );
    // (the README is read on GitHub, where a chapter's includes are not expanded)
    assert_eq!(
        named(
            "README.md:7: (docs/a.md#shared) no heading with the id `shared` in docs/a.md as written"
        ),
        1,
        "{broken:#?}"
    );
    assert_eq!(broken.len(), 7, "only the seven breaks: {broken:#?}");
}

#[test]
fn a_shell_fence_says_whether_it_runs() {
    let words = |info: &str| -> Vec<String> {
        info.split([' ', ','])
            .filter(|w| !w.is_empty())
            .map(String::from)
            .collect()
    };
    assert_eq!(fate(&words("sh")), Ok(Fate::Run { exit: 0 }));
    assert_eq!(fate(&words("sh exit=1")), Ok(Fate::Run { exit: 1 }));
    assert_eq!(fate(&words("sh illustrative")), Ok(Fate::Illustrative));
    assert_eq!(fate(&words("bash,illustrative")), Ok(Fate::Illustrative));
    assert!(fate(&words("sh ilustrative")).is_err_and(|e| e.contains("ilustrative")));
    assert!(fate(&words("sh exit=one")).is_err());
}
