//! docs/design.md's file map against src/ (issue 45 §4): a file under
//! src/ missing from the map, or a name in the map that is no file, fails
//! here, so the map cannot drift from the code.
//!
//! The map is the first code block of docs/design.md. An entry is a line
//! whose first word ends in `.rs` or `/`: a path from the repository's
//! root when it starts with `src/`, else relative to the nearest folder
//! entry above it with less indentation. Other lines (a description
//! going on) name nothing. Unit-test files beside the code they test
//! (`tests.rs`, `*_tests.rs`) are not listed: they belong to their file.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The files the map names (paths from the root), and its folders.
fn map_entries(design: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let block = design
        .split("```")
        .nth(1)
        .expect("docs/design.md starts its map with a code block");
    let (mut files, mut folders) = (BTreeSet::new(), BTreeSet::new());
    // (indentation, folder path) of the folder entries above.
    let mut stack: Vec<(usize, String)> = Vec::new();
    for line in block.lines() {
        let indent = line.len() - line.trim_start().len();
        let Some(word) = line.split_whitespace().next() else {
            continue;
        };
        if !(word.ends_with(".rs") || word.ends_with('/')) {
            continue;
        }
        while stack.last().is_some_and(|(at, _)| *at >= indent) {
            stack.pop();
        }
        let path = match (word.starts_with("src/"), stack.last()) {
            (true, _) => word.to_owned(),
            (false, Some((_, folder))) => format!("{folder}{word}"),
            // A workspace crate (cli/, testkit/, ...): not the library's map.
            (false, None) => continue,
        };
        if let Some(folder) = path.strip_suffix('/') {
            folders.insert(folder.to_owned());
            stack.push((indent, path));
        } else {
            files.insert(path);
        }
    }
    (files, folders)
}

/// Every `.rs` file under `dir`, as paths from the root.
fn rust_files(dir: &Path, found: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path: PathBuf = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(ROOT).expect("under the root");
            found.insert(relative.to_string_lossy().into_owned());
        }
    }
}

fn is_unit_test_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name == "tests.rs" || name.ends_with("_tests.rs")
}

#[test]
fn the_design_maps_every_file_under_src_and_names_no_other() {
    let design = std::fs::read_to_string(format!("{ROOT}/docs/design.md")).expect("docs/design.md");
    let (mapped, folders) = map_entries(&design);
    let mut present = BTreeSet::new();
    rust_files(&Path::new(ROOT).join("src"), &mut present);
    let missing: Vec<_> = present
        .iter()
        .filter(|p| !is_unit_test_file(p) && !mapped.contains(*p))
        .collect();
    let stale: Vec<_> = mapped.iter().filter(|p| !present.contains(*p)).collect();
    let no_folder: Vec<_> = folders
        .iter()
        .filter(|f| !Path::new(ROOT).join(f).is_dir())
        .collect();
    assert!(
        missing.is_empty() && stale.is_empty() && no_folder.is_empty(),
        "docs/design.md's map and src/ differ:\n  not in the map: {missing:?}\n  \
         in the map, not in src/: {stale:?}\n  folders that do not exist: {no_folder:?}"
    );
}
