//! The protobuf API as a contract (architecture.md §11): on a scratch copy of `proto/`, the checks
//! that `cargo xtask api check` runs in `cargo xtask test` refuse a renumbered field, a changed
//! type, a removed field and a removed RPC with buf's message, and pass on the tree as it is;
//! `docs/api.md` is what the `.proto` comments generate.
//!
//! buf and protoc-gen-doc come from [`ProtoTools`] (built from their Go modules once; the
//! test run builds them beforehand).

use std::path::{Path, PathBuf};

use verge_testkit::proto_tools::{self, ProtoTools};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn tools() -> ProtoTools {
    let tools = ProtoTools::from_env();
    tools
        .ensure_built()
        .expect("building buf and protoc-gen-doc");
    tools
}

/// Copies the buf module of `proto/` (its `.proto` files, `buf.yaml`, `api.md.tmpl`) into a
/// temporary directory and returns it with the module's path.
fn scratch_copy() -> (tempfile::TempDir, PathBuf) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).expect("mkdir");
        for entry in std::fs::read_dir(from).expect("read_dir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() {
                if name != "src" && name != "tests" {
                    copy(&path, &to.join(&name));
                }
            } else if path
                .extension()
                .is_some_and(|e| e == "proto" || e == "yaml" || e == "tmpl")
            {
                std::fs::copy(&path, to.join(&name)).expect("copy");
            }
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let proto = dir.path().join("proto");
    copy(&repo_root().join("proto"), &proto);
    (dir, proto)
}

/// Replaces `from` (which must occur exactly once) with `to` in `file` of the copy.
fn edit(proto: &Path, file: &str, from: &str, to: &str) {
    let path = proto.join(file);
    let text = std::fs::read_to_string(&path).expect("read");
    assert_eq!(text.matches(from).count(), 1, "{from:?} in {file}");
    std::fs::write(&path, text.replace(from, to)).expect("write");
}

/// buf's findings for the copy against the API baseline (must be `Err`).
fn breaking_findings(tools: &ProtoTools, proto: &Path) -> String {
    let baseline = proto_tools::baseline(&repo_root()).expect("baseline");
    match tools
        .breaking(proto, &baseline.proto_dir)
        .expect("buf breaking")
    {
        Ok(()) => panic!("buf breaking accepted a breaking change"),
        Err(findings) => findings,
    }
}

#[test]
fn the_api_as_it_is_passes_lint_and_the_breaking_check() {
    let tools = tools();
    let (_dir, proto) = scratch_copy();
    assert_eq!(tools.lint(&proto).expect("buf lint"), Ok(()));
    let baseline = proto_tools::baseline(&repo_root()).expect("baseline");
    assert_eq!(
        tools
            .breaking(&proto, &baseline.proto_dir)
            .expect("buf breaking"),
        Ok(()),
        "against {}",
        baseline.reference
    );
}

#[test]
fn renumbering_a_field_fails_with_bufs_message() {
    let tools = tools();
    let (_dir, proto) = scratch_copy();
    edit(
        &proto,
        "verge/message/v1/message.proto",
        "int64 timestamp_ms = 3;",
        "int64 timestamp_ms = 17;",
    );
    let findings = breaking_findings(&tools, &proto);
    assert!(
        findings.contains(r#"Previously present field "3" with name "timestamp_ms" on message "Header" was deleted"#),
        "{findings}"
    );
}

#[test]
fn changing_a_field_type_fails_with_bufs_message() {
    let tools = tools();
    let (_dir, proto) = scratch_copy();
    edit(
        &proto,
        "verge/message/v1/message.proto",
        "string resource_version = 4;",
        "bytes resource_version = 4;",
    );
    let findings = breaking_findings(&tools, &proto);
    assert!(
        findings.contains(r#"Field "4" with name "resource_version" on message "Header" changed type from "string" to "bytes""#),
        "{findings}"
    );
}

#[test]
fn removing_a_field_or_an_rpc_fails_with_bufs_message() {
    let tools = tools();
    let (_dir, proto) = scratch_copy();
    edit(
        &proto,
        "verge/message/v1/message.proto",
        "  bool sync = 5;\n",
        "",
    );
    edit(
        &proto,
        "verge/hub/v1/hub.proto",
        "  rpc Attach(stream ControllerFrame) returns (stream HubFrame);\n",
        "",
    );
    let findings = breaking_findings(&tools, &proto);
    assert!(
        findings.contains(
            r#"Previously present field "5" with name "sync" on message "Header" was deleted"#
        ),
        "{findings}"
    );
    assert!(
        findings
            .contains(r#"Previously present RPC "Attach" on service "ControllerHub" was deleted"#),
        "{findings}"
    );
}

#[test]
fn docs_api_md_is_what_the_proto_comments_generate() {
    let tools = tools();
    let (_dir, proto) = scratch_copy();
    let generated = tools.api_docs(&proto).expect("generating the reference");
    let committed =
        std::fs::read_to_string(repo_root().join("docs/api.md")).expect("reading docs/api.md");
    assert!(
        generated == committed,
        "docs/api.md is stale: run `cargo xtask api docs`"
    );
    // A changed comment changes the reference, so a stale file is caught.
    edit(
        &proto,
        "verge/message/v1/message.proto",
        "// Object name.",
        "// The object's name.",
    );
    let changed = tools.api_docs(&proto).expect("generating the reference");
    assert_ne!(changed, committed);
    assert!(changed.contains("The object&#39;s name.") || changed.contains("The object's name."));
}

#[test]
fn an_uncommented_field_fails_lint() {
    let tools = tools();
    let (_dir, proto) = scratch_copy();
    edit(
        &proto,
        "verge/message/v1/message.proto",
        "  // Object name.\n",
        "",
    );
    match tools.lint(&proto).expect("buf lint") {
        Ok(()) => panic!("buf lint accepted a field without a comment"),
        Err(findings) => assert!(
            findings.contains(r#"Field "name" should have a non-empty comment for documentation"#),
            "{findings}"
        ),
    }
}
