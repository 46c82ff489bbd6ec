use std::path::Path;

use super::*;
use crate::read::files;
use crate::writer::AuditWriter;

/// A trail of `n` records in `dir`, in files of about `file_bytes`.
fn trail(dir: &Path, n: u64, file_bytes: u64) -> String {
    let mut w = AuditWriter::open(dir, file_bytes).unwrap();
    for i in 0..n {
        let subject = format!("run:r{}", i % 3);
        w.append("gate_decision", &subject, serde_json::json!({ "decision": "allow", "n": i })).unwrap();
    }
    w.head().1.to_owned()
}

fn walk(dir: &Path, kept: Option<&str>) -> Report {
    let contents: Vec<(String, Vec<u8>)> = files(dir)
        .unwrap()
        .into_iter()
        .map(|(_, p)| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    verify(contents.iter().map(|(n, b)| (n.clone(), b.as_slice())), kept)
}

fn only_file(dir: &Path) -> std::path::PathBuf {
    dir.join("audit-000001.jsonl")
}

fn edit_lines(dir: &Path, f: impl FnOnce(&mut Vec<String>)) {
    let path = only_file(dir);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    f(&mut lines);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
}

#[test]
fn a_trail_verifies_across_files_and_its_head_is_the_writers() {
    let tmp = tempfile::tempdir().unwrap();
    let head = trail(tmp.path(), 200, 4096);
    let report = walk(tmp.path(), Some(&head));
    assert_eq!(report.problem, None);
    assert_eq!(report.records, 200);
    assert!(report.files > 3, "rotated: {}", report.files);
    assert_eq!(report.head, Some((200, head)));
    // A writer opened again goes on with the same chain.
    let head = trail(tmp.path(), 5, 4096);
    assert_eq!(walk(tmp.path(), Some(&head)).records, 205);
}

/// What was done to the trail's lines, and the problem verify must name.
type Tampering = (&'static str, fn(&mut Vec<String>), fn(&Problem) -> bool);

#[test]
fn every_kind_of_tampering_is_named_at_its_first_record() {
    let cases: [Tampering; 6] = [
        ("changed", |l| l[4] = l[4].replace("\"allow\"", "\"deny\""), |p| matches!(p, Problem::Changed { seq: 5, .. })),
        ("removed", |l| drop(l.remove(4)), |p| matches!(p, Problem::Removed { first: 5, last: 5, .. })),
        ("reordered", |l| l.swap(4, 5), |p| matches!(p, Problem::OutOfOrder { seq: 6, before: 4, .. })),
        ("inserted", |l| l.insert(4, l[3].clone()), |p| matches!(p, Problem::OutOfOrder { seq: 4, before: 4, .. })),
        ("garbled", |l| l[4] = "{\"v\":1,".into(), |p| matches!(p, Problem::NotARecord { .. })),
        ("first removed", |l| drop(l.remove(0)), |p| matches!(p, Problem::StartsLate { seq: 2, .. })),
    ];
    for (what, tamper, named) in cases {
        let tmp = tempfile::tempdir().unwrap();
        trail(tmp.path(), 10, u64::MAX);
        edit_lines(tmp.path(), tamper);
        let report = walk(tmp.path(), None);
        let problem = report.problem.unwrap_or_else(|| panic!("{what}: not caught"));
        assert!(named(&problem), "{what}: {problem}");
        assert!(problem.to_string().contains("audit-000001.jsonl:"), "{what}: names where: {problem}");
    }
}

#[test]
fn a_line_cut_short_by_a_crash_loses_only_that_record() {
    let tmp = tempfile::tempdir().unwrap();
    trail(tmp.path(), 10, u64::MAX);
    // Killed mid-append: the last line is half written.
    let path = only_file(tmp.path());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"v\":1,\"seq\":11,\"ti");
    std::fs::write(&path, &bytes).unwrap();
    let report = walk(tmp.path(), None);
    assert_eq!((report.problem.clone(), report.records, report.cut_short.len()), (None, 10, 1), "{report:?}");
    // The next writer ends that line and goes on; the chain holds past it.
    let head = trail(tmp.path(), 3, u64::MAX);
    let report = walk(tmp.path(), Some(&head));
    assert_eq!(report.problem, None, "{report:?}");
    assert_eq!((report.records, report.head.map(|h| h.0)), (13, Some(13)));
    assert_eq!(report.cut_short, [Location { file: "audit-000001.jsonl".into(), line: 11 }]);
}

#[test]
fn a_rewritten_or_shortened_trail_is_caught_by_the_head_a_person_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let kept = trail(tmp.path(), 10, u64::MAX);
    // The last records removed: the chain itself is whole, the kept head is gone.
    edit_lines(tmp.path(), |l| l.truncate(8));
    assert_eq!(walk(tmp.path(), None).problem, None);
    assert!(matches!(walk(tmp.path(), Some(&kept)).problem, Some(Problem::HeadMissing { .. })));
    // A whole file removed from the middle of a rotated trail.
    let tmp = tempfile::tempdir().unwrap();
    trail(tmp.path(), 100, 2048);
    std::fs::remove_file(tmp.path().join("audit-000002.jsonl")).unwrap();
    assert!(matches!(walk(tmp.path(), None).problem, Some(Problem::Removed { .. })));
}
