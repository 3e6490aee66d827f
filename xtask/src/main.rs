//! `cargo xtask`: regenerate the bindings, manage the pinned schema, check every release.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use xtask::codegen::stamp::{self, STAMP_PATH, Stamp};
use xtask::codegen::{self, Settings};
use xtask::releases::{DEFAULT_NEXT, DEFAULT_ROOT as DEFAULT_RELEASES, resolve_in};
use xtask::schema::{self, Lock};
use xtask::semver;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Maintenance commands of the ACP toolchain")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Regenerate `generated/` from the pinned schema.
    Codegen {
        /// A release folder (holding v1/ and v2/); defaults to schema/json, filled by `schema fetch`.
        #[arg(long)]
        schema_dir: Option<PathBuf>,
        /// Compare with the checked-in files instead of writing; fail when any is stale.
        #[arg(long)]
        check: bool,
        /// With --check: regenerate and compare every file even when `schema/codegen.stamp`
        /// vouches for them (the stamp only skips work; the verdict is the same).
        #[arg(long, requires = "check")]
        full: bool,
        /// Fail when a definition has no typing rule, instead of emitting it as raw JSON and
        /// listing it (CI runs the pinned schema this way).
        #[arg(long)]
        strict: bool,
    },
    /// The pinned upstream schema.
    Schema {
        #[command(subcommand)]
        command: SchemaCommand,
    },
    /// Check that the runtime's modules refer only down its floors (see docs/architecture.md).
    Layers {
        /// The crate's `src` folder [default: runtime/src].
        #[arg(long)]
        src: Option<PathBuf>,
        /// Print every reference between modules found.
        #[arg(long)]
        graph: bool,
    },
    /// Report what changed between two schema versions (breaking changes flagged).
    Diff {
        /// A release folder, a version folder (with schema.json), or a release tag under --root.
        old: String,
        /// Same as OLD.
        new: String,
        /// Where tags are looked up [default: ../shared/acp-schema/releases, then
        /// ../shared/acp-schema/next, from the workspace root].
        #[arg(long)]
        root: Option<PathBuf>,
        /// JSON instead of Markdown.
        #[arg(long)]
        json: bool,
    },
    /// Report what moving from one schema release to another does to the generated crate's
    /// public API (items added, changed, removed; cargo-semver-checks' verdict) and propose the
    /// version bump.
    Semver {
        /// The release the crate is generated from now: a release folder or a tag under --root
        /// [default: the pinned schema, schema/json].
        #[arg(long)]
        from: Option<String>,
        /// The release to move to: a release folder or a tag under --root.
        #[arg(long)]
        to: String,
        /// Where tags are looked up [default: ../shared/acp-schema/releases, then
        /// ../shared/acp-schema/next, from the workspace root].
        #[arg(long)]
        root: Option<PathBuf>,
        /// JSON instead of Markdown.
        #[arg(long)]
        json: bool,
        /// Do not run cargo-semver-checks: the public items and their levels only.
        #[arg(long)]
        skip_semver_checks: bool,
    },
    /// Write the v1 types (and optionally the traits) into one self-contained Rust file.
    Vendor {
        /// The file to write.
        #[arg(long)]
        out: PathBuf,
        /// Unstable features to include (`unstable` for all of them), comma-separated.
        #[arg(long, value_delimiter = ',')]
        features: Vec<String>,
        /// Leave out the method enums and the Agent / Client traits.
        #[arg(long)]
        types_only: bool,
        /// Extra derives, comma-separated. `Eq`, `Hash`, `PartialOrd` and `Ord` go on every type
        /// whose fields all implement them (not on those holding an `f64`, say; the output lists
        /// them); other paths, such as `my_crate::MyTrait`, go on every type. `Default`, `Copy`
        /// and serde's derives are refused.
        #[arg(long, value_delimiter = ',')]
        derive: Vec<String>,
        /// A release folder; defaults to schema/json.
        #[arg(long)]
        schema_dir: Option<PathBuf>,
    },
    /// Generate every release under each ROOT into a scratch crate and compile it without
    /// warnings; list what the generator could not type.
    CheckReleases {
        /// A folder holding one folder per release tag, repeatable [default:
        /// ../shared/acp-schema/releases and, when it exists, ../shared/acp-schema/next, from the
        /// workspace root].
        #[arg(long)]
        root: Vec<PathBuf>,
    },
    /// Check the book's links, heading anchors and includes (see xtask/src/book.rs).
    BookLinks {
        /// The book's source folder.
        #[arg(long, default_value = "docs/book/src")]
        src: PathBuf,
    },
    /// Run a client and an agent process against each other for a fixed time; fail if their
    /// memory or file descriptors grow (see xtask/src/soak.rs).
    Soak {
        /// How long the two processes talk.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Concurrent sessions.
        #[arg(long, default_value_t = 4)]
        sessions: usize,
        /// Allowed RSS growth of each process after the warm-up, in MiB.
        #[arg(long, default_value_t = 8)]
        max_rss_growth_mib: u64,
    },
}

#[derive(Subcommand)]
enum SchemaCommand {
    /// Fill schema/json with the files pinned in schema/lock.json, verifying their sha256.
    Fetch {
        /// Copy from this release folder instead of downloading.
        #[arg(long)]
        from: Option<PathBuf>,
    },
    /// Move the pin to another release or published package: verify it generates, update
    /// schema/lock.json and schema/json, regenerate, and write the change report to
    /// schema/CHANGES.md.
    Update {
        /// The tag to pin: an upstream release tag, or the name a package's schema goes by
        /// [default with --npm: `npm-sdk-VERSION`].
        #[arg(long, required_unless_present = "npm")]
        to: Option<String>,
        /// The release folder (holding v1/ and v2/); defaults to the folder of that tag under
        /// ../shared/acp-schema/releases or ../shared/acp-schema/next, from the workspace root.
        #[arg(long, conflicts_with = "npm")]
        from: Option<PathBuf>,
        /// Pin the schema a published npm package ships (in its `schema/` folder), fetched with
        /// `npm pack`: the official TypeScript SDK's package at this version, or --npm-package's.
        #[arg(long, value_name = "VERSION")]
        npm: Option<String>,
        /// The npm package of --npm.
        #[arg(long, default_value = schema::OFFICIAL_NPM_PACKAGE, requires = "npm")]
        npm_package: String,
        /// The upstream commit of the release, recorded in the lock (kept when the tag is unchanged).
        #[arg(long)]
        commit: Option<String>,
        /// The version of the release's schema artifacts (e.g. `1.21.0`, published as the
        /// GitHub release `schema-v1.21.0`); required when the tag changes to another release.
        #[arg(long)]
        schema_version: Option<String>,
        /// Where `schema fetch` downloads the files from; defaults to upstream's
        /// `.../releases/download/schema-v{SCHEMA_VERSION}`.
        #[arg(long, conflicts_with = "npm")]
        release_url: Option<String>,
        /// Write the API report without cargo-semver-checks' verdict (the public items and
        /// their levels only); without it, a missing cargo-semver-checks stops the update.
        #[arg(long)]
        skip_semver_checks: bool,
    },
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_owned).unwrap_or_default()
}

/// `../shared/acp-schema/releases` from the workspace root, whatever the current directory.
fn default_releases(root: &Path) -> PathBuf {
    let dir = root.join(DEFAULT_RELEASES);
    dir.canonicalize().unwrap_or(dir)
}

/// Where release tags are looked up: the folder given with `--root`, else the upstream releases
/// and, when it exists, the newer published schemas (`../shared/acp-schema/next`).
fn release_roots(root: &Path, given: Option<PathBuf>) -> Vec<PathBuf> {
    if let Some(given) = given {
        return vec![given];
    }
    let next = root.join(DEFAULT_NEXT);
    std::iter::once(default_releases(root)).chain(next.is_dir().then(|| next.canonicalize().unwrap_or(next))).collect()
}

/// A missing cargo-semver-checks stops `semver` and `schema update`; the error says how to
/// install it, and this adds how to go without.
fn skip_hint(error: String) -> String {
    if error.contains("cargo-semver-checks is not installed") {
        format!("{error}\nor pass --skip-semver-checks for a report without its verdict")
    } else {
        error
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<(), String> {
    let root = workspace_root();
    let lock_path = root.join("schema/lock.json");
    match command {
        Command::Codegen { schema_dir, check, full, strict } => {
            let lock_json =
                std::fs::read(&lock_path).map_err(|e| format!("cannot read {}: {e}", lock_path.display()))?;
            let lock = Lock::read(&lock_path).map_err(|e| e.to_string())?;
            let dir = schema_dir.unwrap_or_else(|| root.join("schema/json"));
            if !dir.join("v1/schema.json").exists() {
                return Err(format!(
                    "no schema in {}: run `cargo xtask schema fetch --from ../shared/acp-schema/releases/{}` \
                     (or without --from to download), or pass --schema-dir",
                    dir.display(),
                    lock.tag
                ));
            }
            lock.verify_dir(&dir).map_err(|e| e.to_string())?;
            // The stamp vouches for the output, not for what the generator could not type: a
            // strict run loads the schema to find out.
            if check && !full && !strict && Stamp::vouches(&root, &lock_json) {
                println!(
                    "generated/, macros/src/table.rs and the book's handler tables are up to date with schema {} \
                     ({STAMP_PATH} vouches for them; --full regenerates to compare)",
                    lock.tag
                );
                return Ok(());
            }
            let started = std::time::Instant::now();
            let readme_path = root.join(stamp::HANDLER_TABLES_FILE);
            let readme = std::fs::read_to_string(&readme_path)
                .map_err(|e| format!("cannot read {}: {e}", stamp::HANDLER_TABLES_FILE))?;
            let settings = Settings { strict, ..Settings::new(&dir, &lock.tag) };
            let codegen::Generated { files, macro_table: table, readme, untyped } =
                codegen::generate_all(&settings, &readme).map_err(|e| e.to_string())?;
            for definition in &untyped {
                eprintln!("warning: not typed, emitted as raw JSON: {definition}");
            }
            let mut stale =
                codegen::write_or_check(&root.join("generated"), &files, check).map_err(|e| e.to_string())?;
            stale.extend(
                codegen::write_or_check(&root.join("macros"), std::slice::from_ref(&table), check)
                    .map_err(|e| e.to_string())?,
            );
            let stamp = Stamp::of_run(&lock_json, &files, &table, Some(&readme)).render();
            let file = codegen::OutputFile { path: stamp::HANDLER_TABLES_FILE.into(), contents: readme };
            stale.extend(codegen::write_or_check(&root, &[file], check).map_err(|e| e.to_string())?);
            // Last, so that a run interrupted before it leaves the old stamp, which then vouches
            // for nothing.
            let stamp = codegen::OutputFile { path: STAMP_PATH.into(), contents: stamp };
            stale.extend(codegen::write_or_check(&root, &[stamp], check).map_err(|e| e.to_string())?);
            if check {
                if stale.is_empty() {
                    println!(
                        "generated/, macros/src/table.rs and the book's handler tables are up to date with schema {} ({} files)",
                        lock.tag,
                        files.len() + 2
                    );
                } else {
                    let list: Vec<String> = stale.iter().map(|p| format!("  {}", p.display())).collect();
                    return Err(format!(
                        "generated code is stale:\n{}\nregenerate with: cargo xtask codegen",
                        list.join("\n")
                    ));
                }
            } else {
                println!(
                    "generated {} files from schema {} in {:.0?} ({} changed)",
                    files.len(),
                    lock.tag,
                    started.elapsed(),
                    stale.len()
                );
            }
            Ok(())
        }
        Command::Schema { command: SchemaCommand::Fetch { from } } => {
            let lock = Lock::read(&lock_path).map_err(|e| e.to_string())?;
            let out = root.join("schema/json");
            schema::fetch(&lock, from.as_deref(), &out).map_err(|e| e.to_string())?;
            println!("schema {} ({} files) verified into {}", lock.tag, lock.files.len(), out.display());
            Ok(())
        }
        Command::CheckReleases { root: roots } => {
            let roots = if roots.is_empty() { release_roots(&root, None) } else { roots };
            xtask::releases::check_all(&root, &roots)
        }
        Command::Layers { src, graph } => {
            let src = src.unwrap_or_else(|| root.join("runtime/src"));
            let report = xtask::layers::check(&src, xtask::layers::ACP_RPC)?;
            if graph {
                for (from, to) in &report.edges {
                    println!("{from} -> {to}");
                }
            }
            if report.violations.is_empty() {
                println!("layers: {} references between modules, all down the floors", report.edges.len());
                Ok(())
            } else {
                for violation in &report.violations {
                    eprintln!("{violation}");
                }
                Err(format!("layers: {} rules broken in {}", report.violations.len(), src.display()))
            }
        }
        Command::BookLinks { src } => {
            let src = if src.is_absolute() { src } else { root.join(src) };
            let problems = xtask::book::check(&src)?;
            if problems.is_empty() {
                println!("{}: every link, heading anchor and include resolves", src.display());
                return Ok(());
            }
            let list: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
            Err(format!("{} broken in {}:\n{}", problems.len(), src.display(), list.join("\n")))
        }
        Command::Soak { seconds, sessions, max_rss_growth_mib } => {
            let options = xtask::soak::Options { seconds, sessions, max_rss_growth_kib: max_rss_growth_mib * 1024 };
            let report = xtask::soak::run(&root, &options)?;
            print!("{}", report.markdown());
            if report.passed() { Ok(()) } else { Err(format!("soak failed: {}", report.failures.join("; "))) }
        }
        Command::Diff { old, new, root: releases, json } => {
            let roots = release_roots(&root, releases);
            let (old, new) = (resolve_in(&old, &roots)?, resolve_in(&new, &roots)?);
            let report = xtask::diff::diff_dirs(&old, &new).map_err(|e| e.to_string())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
            } else {
                print!("{}", report.markdown());
            }
            Ok(())
        }
        Command::Schema {
            command:
                SchemaCommand::Update {
                    to,
                    from,
                    npm,
                    npm_package,
                    commit,
                    schema_version,
                    release_url,
                    skip_semver_checks,
                },
        } => {
            let npm = npm.map(|version| schema::NpmPackage { package: npm_package, version });
            let tag = match (&to, &npm) {
                (Some(to), _) => to.clone(),
                (None, Some(npm)) => npm.tag(),
                (None, None) => return Err("--to or --npm is required".into()),
            };
            let from = match (from, &npm) {
                (Some(from), _) => from,
                (None, Some(npm)) => {
                    let dir = root.join("target/schema-npm").join(&tag);
                    let _ = std::fs::remove_dir_all(&dir);
                    npm.unpack(&dir).map_err(|e| e.to_string())?
                }
                (None, None) => resolve_in(&tag, &release_roots(&root, None))?,
            };
            let semver_checks = if skip_semver_checks { semver::Tool::Skip } else { semver::Tool::Run };
            let options = schema::UpdateOptions { commit, schema_version, release_url, semver_checks, npm };
            schema::update(&root, &tag, &from, &options).map_err(skip_hint)
        }
        Command::Semver { from, to, root: releases, json, skip_semver_checks } => {
            let roots = release_roots(&root, releases);
            // Both folders are found before either side is generated: a mistyped tag is
            // reported as such, whatever state the pinned schema is in.
            let to_dir = resolve_in(&to, &roots)?;
            let from_dir = from.as_deref().map(|from| resolve_in(from, &roots)).transpose()?;
            let old = match (from, from_dir) {
                (Some(from), Some(dir)) => semver::Side::generate(&dir, &from)?,
                _ => {
                    let lock = Lock::read(&lock_path).map_err(|e| e.to_string())?;
                    let pinned = root.join("schema/json");
                    lock.verify_dir(&pinned).map_err(|e| format!("{e}\nrun `cargo xtask schema fetch` first"))?;
                    semver::Side::generate(&pinned, &lock.tag)?
                }
            };
            let new = semver::Side::generate(&to_dir, &to)?;
            let tool = if skip_semver_checks { semver::Tool::Skip } else { semver::Tool::Run };
            let report = semver::report(&root, &old, &new, tool).map_err(skip_hint)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
            } else {
                print!("{}", report.markdown());
            }
            Ok(())
        }
        Command::Vendor { out, features, types_only, derive, schema_dir } => {
            let lock = Lock::read(&lock_path).map_err(|e| e.to_string())?;
            let dir = schema_dir.unwrap_or_else(|| root.join("schema/json"));
            lock.verify_dir(&dir).map_err(|e| e.to_string())?;
            let codegen::Vendored { text, notes, warnings } =
                codegen::vendor(&Settings::new(&dir, &lock.tag), &features, !types_only, &derive)
                    .map_err(|e| e.to_string())?;
            if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
            }
            std::fs::write(&out, &text).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
            println!("vendored {} lines into {}", text.lines().count(), out.display());
            for note in notes {
                println!("  {note}");
            }
            for warning in warnings {
                eprintln!("warning: {warning}");
            }
            Ok(())
        }
    }
}
