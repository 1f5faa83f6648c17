//! `tenure --version` names the commit it was built from: `tenure 0.1.0 (commit 24ed8a4)`.
//!
//! The commit comes from, in order: `.cargo_vcs_info.json`, which `cargo package` writes into
//! a published crate (so `cargo install tenure-cli` from a registry knows it too); `git
//! rev-parse --short HEAD` in a checkout; else `commit unknown`. Uncommitted changes are not
//! shown: the commit is the one checked out when the binary was built.

use std::path::Path;
use std::process::Command;

fn main() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let dir = Path::new(&manifest_dir);
    let commit = from_crate_vcs_info(dir)
        .or_else(|| from_git(dir))
        .map_or_else(|| "commit unknown".to_string(), |c| format!("commit {c}"));
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!("cargo:rustc-env=TENURE_VERSION={version} ({commit})");
}

/// The `"sha1"` of a packaged crate's `.cargo_vcs_info.json`, shortened as git does.
fn from_crate_vcs_info(dir: &Path) -> Option<String> {
    let path = dir.join(".cargo_vcs_info.json");
    let text = std::fs::read_to_string(&path).ok()?;
    watch(&path);
    let start = text.find("\"sha1\"")?;
    let sha = text[start + 6..]
        .split('"')
        .nth(1)
        .filter(|s| s.len() >= 7 && s.bytes().all(|b| b.is_ascii_hexdigit()))?;
    Some(sha[..7].to_string())
}

/// `git rev-parse --short HEAD`, rebuilt when HEAD moves (a commit, a checkout, a branch
/// reset): HEAD itself, the branch's own ref file (or, while that branch is only in the packed
/// refs, its directory, where a commit creates it) and the packed refs are watched.
fn from_git(dir: &Path) -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !text.is_empty()).then_some(text)
    };
    let commit = git(&["rev-parse", "--short", "HEAD"])?;
    // Relative paths are relative to `dir`, where git ran.
    let path = |name: &str| git(&["rev-parse", "--git-path", name]).map(|p| dir.join(p));
    for file in [path("HEAD"), path("packed-refs")].into_iter().flatten() {
        if file.exists() {
            watch(&file);
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]).and_then(|b| path(&b)) {
        match (branch.exists(), branch.parent()) {
            (true, _) => watch(&branch),
            (false, Some(parent)) => watch(parent),
            (false, None) => {}
        }
    }
    Some(commit)
}

/// Reruns this script when `path` changes. Only existing paths: Cargo reruns a script that
/// watches a missing one on every build.
fn watch(path: &Path) {
    println!("cargo:rerun-if-changed={}", path.display());
}
