//! The pinned schema: the lock `schema update` writes, where `schema fetch` downloads from,
//! and how the commands find the upstream releases.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use xtask::codegen::Gating;
use xtask::schema::{self, Lock, UpdateOptions};

fn releases() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/acp-schema/releases")
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn pinned() -> Lock {
    Lock::read(&workspace().join("schema/lock.json")).unwrap()
}

/// A lock pinning an upstream repository release (v1.7.0), whatever the project pins now:
/// the tests of release addresses and downloads start from it.
fn release_pin() -> Lock {
    Lock {
        upstream: "agentclientprotocol/agent-client-protocol".into(),
        tag: "v1.7.0".into(),
        commit: "272bf799f35a258c6a4107a0410ed361e83683d3".into(),
        schema_version: Some("1.21.0".into()),
        release_url: Some(
            "https://github.com/agentclientprotocol/agent-client-protocol/releases/download/schema-v1.21.0".into(),
        ),
        npm: None,
        files: shas(&releases().join("v1.7.0")),
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("schema").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn other_files() -> BTreeMap<String, String> {
    BTreeMap::from([("v1/schema.json".to_owned(), "00".repeat(32))])
}

#[test]
fn a_new_tag_gets_its_own_schema_version_and_release_url() {
    let old = release_pin();
    let options =
        UpdateOptions { schema_version: Some("1.22.0".into()), commit: Some("abc".into()), ..Default::default() };
    let lock = schema::pin(&old, "v1.8.0", other_files(), &options).expect("pins");
    assert_eq!(lock.tag, "v1.8.0");
    assert_eq!(lock.schema_version.as_deref(), Some("1.22.0"));
    assert_eq!(
        lock.release_url.as_deref(),
        Some("https://github.com/agentclientprotocol/agent-client-protocol/releases/download/schema-v1.22.0")
    );
    assert_eq!((lock.commit.as_str(), &lock.upstream), ("abc", &old.upstream));

    let url = UpdateOptions { release_url: Some("https://example.org/acp/".into()), ..options };
    let lock = schema::pin(&old, "v1.8.0", other_files(), &url).unwrap();
    assert_eq!(lock.release_url.as_deref(), Some("https://example.org/acp"));
}

#[test]
fn a_new_tag_never_keeps_the_old_release_address() {
    let old = release_pin();
    let err = schema::pin(&old, "v1.8.0", other_files(), &UpdateOptions::default()).expect_err("no version");
    let old_version = old.schema_version.clone().unwrap();
    assert!(err.contains("--schema-version is required") && err.contains(&old_version), "{err}");
    // The pinned version again, for files that changed: a stale value typed back in.
    let stale = UpdateOptions { schema_version: Some(old_version), ..Default::default() };
    let err = schema::pin(&old, "v1.8.0", other_files(), &stale).expect_err("same version, other files");
    assert!(err.contains("--schema-version") && err.contains("differ"), "{err}");
    let err = schema::pin(
        &old,
        "v1.8.0",
        other_files(),
        &UpdateOptions { schema_version: Some("v1.22.0".into()), ..Default::default() },
    )
    .expect_err("a tag is not a version");
    assert!(err.contains("--schema-version `v1.22.0`"), "{err}");
    // The same tag keeps what the lock says.
    let same = schema::pin(&old, &old.tag, old.files.clone(), &UpdateOptions::default()).unwrap();
    assert_eq!(same, old);
}

#[test]
fn release_assets_are_flat() {
    assert_eq!(schema::asset_name("v1/schema.json"), "schema.json");
    assert_eq!(schema::asset_name("v1/meta.unstable.json"), "meta.unstable.json");
    assert_eq!(schema::asset_name("v2/schema.json"), "schema.v2.json");
    assert_eq!(schema::asset_name("v2/meta.unstable.json"), "meta.v2.unstable.json");
}

#[test]
fn fetch_without_from_downloads_the_assets_the_lock_names() {
    // A local "release" laid out as upstream publishes it: one flat folder of assets, read with
    // curl through a file:// address, as `schema fetch` reads the GitHub release.
    let lock = release_pin();
    let assets = scratch("assets");
    for file in lock.files.keys() {
        std::fs::copy(releases().join(&lock.tag).join(file), assets.join(schema::asset_name(file))).unwrap();
    }
    let lock = Lock { release_url: Some(format!("file://{}", assets.display())), ..lock };
    let out = scratch("fetched");
    schema::fetch(&lock, None, &out).expect("downloads every pinned file");
    lock.verify_dir(&out).unwrap();
}

#[test]
fn the_feature_table_goes_with_the_pinned_tag() {
    let mut lock = pinned();
    let root = common::release_dir(&lock.tag).parent().unwrap().to_owned();
    let plan = xtask::releases::plan(&lock, &root).unwrap();
    let table: Vec<&str> = plan.iter().filter(|(_, g)| *g == Gating::Table).map(|(t, _)| t.as_str()).collect();
    assert_eq!(table, [lock.tag.as_str()]);
    lock.tag = "v1.3.0".into();
    let plan = xtask::releases::plan(&lock, &releases()).unwrap();
    assert!(plan.contains(&("v1.3.0".to_owned(), Gating::Table)), "{plan:?}");
    assert!(plan.contains(&("v1.7.0".to_owned(), Gating::AllInOne)), "{plan:?}");
}

fn xtask_in(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask")).current_dir(dir).args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn releases_are_found_from_any_directory() {
    // Outside the workspace altogether: the default root is the workspace's, not the cwd's.
    let elsewhere = scratch("cwd");
    let (ok, stdout, stderr) = xtask_in(&elsewhere, &["diff", "v1.3.0", "v1.7.0", "--json"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("\"changes\""), "{stdout}");

    let (ok, _, stderr) = xtask_in(&elsewhere, &["diff", "v9.9.9", "v1.7.0"]);
    assert!(!ok);
    assert!(stderr.contains("no release `v9.9.9` under") && stderr.contains("v1.7.0"), "{stderr}");
    assert!(!stderr.contains("schema.json"), "names the release, not a file inside it: {stderr}");
}

#[test]
fn update_to_a_new_tag_writes_its_release_into_the_lock() {
    // A "v1.8.0" with v1.7.0's files (the only release the feature table fits).
    let ws = scratch("update-ws");
    std::fs::create_dir_all(ws.join("schema")).unwrap();
    std::fs::create_dir_all(ws.join("generated")).unwrap();
    for file in ["schema/lock.json", "Cargo.toml", "generated/Cargo.toml"] {
        std::fs::copy(workspace().join(file), ws.join(file)).unwrap();
    }
    let old = release_pin();
    std::fs::write(ws.join("schema/lock.json"), serde_json::to_string_pretty(&old).unwrap() + "\n").unwrap();
    schema::fetch(&old, Some(&releases().join(&old.tag)), &ws.join("schema/json")).unwrap();
    let next = scratch("v1.8.0");
    // The files of the release the feature table describes, under a new tag.
    let (pinned, _) = common::pinned_release();
    for file in shas(&pinned).keys() {
        std::fs::create_dir_all(next.join(file).parent().unwrap()).unwrap();
        std::fs::copy(pinned.join(file), next.join(file)).unwrap();
    }

    let err = schema::update(&ws, "v1.8.0", &next, &UpdateOptions::default()).expect_err("no --schema-version");
    assert!(err.contains("--schema-version"), "{err}");
    assert_eq!(Lock::read(&ws.join("schema/lock.json")).unwrap(), old, "a refused update changes nothing");

    let options =
        UpdateOptions { schema_version: Some("1.22.0".into()), commit: Some("abc".into()), ..Default::default() };
    schema::update(&ws, "v1.8.0", &next, &options).expect("updates");
    let lock = Lock::read(&ws.join("schema/lock.json")).unwrap();
    assert_eq!((lock.tag.as_str(), lock.schema_version.as_deref()), ("v1.8.0", Some("1.22.0")));
    let url = lock.release_url.unwrap_or_default();
    assert!(url.ends_with("/releases/download/schema-v1.22.0"), "{url}");
}

fn next() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/acp-schema/next")
}

/// The files of a release folder with their sha256, as a lock names them.
fn shas(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for version in ["v1", "v2"] {
        for name in ["schema.json", "schema.unstable.json", "meta.json", "meta.unstable.json"] {
            if let Ok(bytes) = std::fs::read(dir.join(version).join(name)) {
                out.insert(format!("{version}/{name}"), xtask::codegen::load::sha256(&bytes));
            }
        }
    }
    out
}

#[test]
fn a_pin_from_an_npm_package_records_the_package_and_no_release_address() {
    let old = pinned();
    let npm = schema::NpmPackage::official("2.4.0");
    assert_eq!(npm.tag(), "npm-sdk-2.4.0");
    let files = shas(&next().join("npm-sdk-2.4.0"));
    assert_eq!(files.len(), 4, "schema.json and schema.unstable.json of v1 and v2, no meta.json: {files:?}");
    let options = UpdateOptions { npm: Some(npm.clone()), ..Default::default() };
    let lock = schema::pin(&old, &npm.tag(), files.clone(), &options).expect("pins without --schema-version");
    assert_eq!(lock.npm.as_ref(), Some(&npm));
    assert_eq!((lock.release_url.as_deref(), lock.schema_version.as_deref()), (None, None));
    assert_eq!(lock.files, files);
    // Written and read back as the lock file is; a release's lock keeps its fields.
    let text = serde_json::to_string_pretty(&lock).unwrap();
    assert!(text.contains("\"npm\"") && !text.contains("release_url"), "{text}");
    assert_eq!(serde_json::from_str::<Lock>(&text).unwrap(), lock);
    let pinned_text = std::fs::read_to_string(workspace().join("schema/lock.json")).unwrap();
    assert_eq!(serde_json::to_string_pretty(&old).unwrap() + "\n", pinned_text, "the release lock is unchanged");
    // The same tag again keeps the package.
    let again = schema::pin(&lock, &lock.tag, files, &UpdateOptions::default()).unwrap();
    assert_eq!(again, lock);
    let err = schema::pin(
        &old,
        "npm-sdk-2.4.0",
        lock.files.clone(),
        &UpdateOptions { release_url: Some("https://example.org".into()), ..options },
    )
    .expect_err("a package has no release address");
    assert!(err.contains("--release-url"), "{err}");
}

#[test]
fn fetch_gets_a_pinned_package_through_npm_and_verifies_it() {
    // The official SDK 2.4.0 from the npm registry, checked against the copy in ../shared.
    let npm = schema::NpmPackage::official("2.4.0");
    let files = shas(&next().join("npm-sdk-2.4.0"));
    let options = UpdateOptions { npm: Some(npm.clone()), ..Default::default() };
    let lock = schema::pin(&pinned(), &npm.tag(), files, &options).unwrap();
    let out = scratch("npm-fetched").join("json");
    schema::fetch(&lock, None, &out).expect("npm pack fetches the package");
    lock.verify_dir(&out).unwrap();
    assert!(!out.with_file_name("npm-package").exists(), "the unpacked package is cleaned up");

    // A file that does not match is refused, naming it.
    let mut wrong = lock.clone();
    wrong.files.insert("v2/schema.json".into(), "00".repeat(32));
    let err = schema::fetch(&wrong, None, &scratch("npm-wrong").join("json")).expect_err("sha256 mismatch");
    assert!(err.to_string().contains("v2/schema.json"), "{err}");
    // A version that does not exist is npm's error, with what to do offline.
    let missing = Lock { npm: Some(schema::NpmPackage::official("0.0.0-none")), ..lock };
    let err = schema::fetch(&missing, None, &scratch("npm-missing").join("json")).expect_err("no such version");
    assert!(
        err.to_string().contains("@agentclientprotocol/sdk@0.0.0-none") && err.to_string().contains("--from"),
        "{err}"
    );
}
