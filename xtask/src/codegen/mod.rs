//! The generator: ACP JSON Schema → the `generated/` crate.
//!
//! Data flow: [`load`] reads a release folder → [`classify`] turns every definition into an IR
//! item and [`methods`] builds the method table → [`features`] merges stable and unstable into
//! one gated model → [`emit`] produces tokens → `syn` and `prettyplease` format them at the
//! edge, in [`generate`], one item at a time on every core, with the doc comments set aside
//! ([`docs`]). Every step returns [`CodegenError`] instead of panicking, naming the definition
//! and the construct it could not handle.

pub mod classify;
mod derives;
pub mod docs;
pub mod emit;
pub mod features;
pub mod ir;
pub mod load;
pub mod macro_table;
pub mod methods;
pub mod naming;
pub mod stamp;
mod syntax;
mod tidy;

use std::path::{Path, PathBuf};

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};

pub use features::Gating;
use ir::{ItemKind, Model};
use load::VersionFiles;

/// Why the generator stopped.
#[derive(Debug, thiserror::Error)]
pub enum CodegenError {
    /// A schema construct the generator has no Rust shape for.
    #[error("definition `{definition}`: cannot generate {construct}")]
    Unsupported {
        /// The `$defs` entry it sits in.
        definition: String,
        /// What could not be generated.
        construct: String,
    },
    /// Anything else that does not fit: a feature or method table at odds with the schema,
    /// `meta.json`, a `--derive` or feature name, a panicked thread.
    #[error("{0}")]
    Table(String),
    /// An input file that cannot be read, or lacks what the generator needs.
    #[error("{path}: {message}")]
    Input {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// Definitions the generator emitted as raw JSON for want of a rule, refused under
    /// [`Settings::strict`].
    #[error(
        "{} definition(s) have no typing rule (refused by --strict):\n  {}",
        .0.len(),
        .0.join("\n  ")
    )]
    Untyped(Vec<String>),
    /// Emitted code or a template that is not as expected (mostly: it does not parse), a bug
    /// in the generator.
    #[error("generated code does not parse ({file}): {message}")]
    Emit {
        /// The output file, or the part of a vendored file, being built.
        file: String,
        /// What is wrong, usually `syn`'s error.
        message: String,
    },
}

impl CodegenError {
    pub(crate) fn unsupported(definition: &str, construct: &str) -> Self {
        CodegenError::Unsupported { definition: definition.to_owned(), construct: construct.to_owned() }
    }

    pub(crate) fn table(message: &str) -> Self {
        CodegenError::Table(message.to_owned())
    }
}

/// The generator's result, failing with [`CodegenError`] by default.
pub type Result<T, E = CodegenError> = std::result::Result<T, E>;

/// What to generate.
#[derive(Debug, Clone)]
pub struct Settings {
    /// A release folder holding `v1/` (and optionally `v2/`).
    pub schema_dir: PathBuf,
    /// The upstream tag named in the preamble.
    pub tag: String,
    /// How unstable items are gated behind cargo features.
    pub gating: Gating,
    /// The package name written to the generated `Cargo.toml`.
    pub package: String,
    /// Emit the protocol v2 module when the release has one.
    pub v2: bool,
    /// Write a `Cargo.toml` that stands alone (scratch crates) rather than a workspace member.
    pub standalone: bool,
    /// Fail when a definition has no typing rule, instead of emitting it as raw JSON and
    /// reporting it.
    pub strict: bool,
}

impl Settings {
    /// What `cargo xtask codegen` generates from `schema_dir` (release `tag`): gated by the
    /// feature table, package `acp-types`, v2 included, as a workspace member.
    pub fn new(schema_dir: impl Into<PathBuf>, tag: impl Into<String>) -> Self {
        Settings {
            schema_dir: schema_dir.into(),
            tag: tag.into(),
            gating: Gating::Table,
            package: "acp-types".into(),
            v2: true,
            standalone: false,
            strict: false,
        }
    }
}

/// One file of the generated crate, relative to the crate root.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputFile {
    /// Where it goes, relative to the crate root.
    pub path: PathBuf,
    /// Its text.
    pub contents: String,
}

/// The feature that gates protocol v2.
pub const V2_FEATURE: &str = "unstable_protocol_v2";

/// Builds the merged model of one protocol version folder.
pub fn build_model(files: &VersionFiles, gating: Gating) -> Result<Model> {
    let version = files.protocol_version()?;
    let stable = model_of(&files.schema, files.meta.as_ref(), &files.dir.join("schema.json"), version)?;
    match &files.schema_unstable {
        Some(schema) => {
            let path = files.dir.join("schema.unstable.json");
            let unstable = model_of(schema, files.meta_unstable.as_ref(), &path, version)?;
            features::merge(&stable, &unstable, gating)
        }
        None => Ok(stable),
    }
}

fn model_of(
    schema: &serde_json::Value,
    meta: Option<&serde_json::Value>,
    path: &Path,
    protocol_version: Option<u16>,
) -> Result<Model> {
    let defs = schema
        .get("$defs")
        .or_else(|| schema.get("definitions"))
        .and_then(serde_json::Value::as_object)
        .ok_or_else(|| CodegenError::Input { path: path.to_owned(), message: "no `$defs` object".into() })?;
    let mut items = classify::Classifier::new(defs).classify_all()?;
    for item in &mut items {
        if let Err(CodegenError::Unsupported { construct, .. }) = emit::check_names(item) {
            let def = defs.get(&item.name).cloned().unwrap_or_default();
            *item = classify::untyped(&item.name, &def, construct);
        }
    }
    let (methods, protocol_methods) = methods::method_table(defs, meta, protocol_version.unwrap_or(1))?;
    Ok(Model { items, methods, protocol_methods, protocol_version })
}

/// Generates every file of the crate.
pub fn generate(settings: &Settings) -> Result<Vec<OutputFile>> {
    generate_reported(settings).map(|(files, _)| files)
}

/// Generates every file of the crate, with the definitions emitted as raw JSON for want of a
/// rule (`v1 `Name`: reason`; empty when every definition is typed).
pub fn generate_reported(settings: &Settings) -> Result<(Vec<OutputFile>, Vec<String>)> {
    let loaded = load_all(settings)?;
    Ok((generate_from(settings, &loaded)?, loaded.untyped()))
}

/// Everything `cargo xtask codegen` writes, from one load of the schema.
#[derive(Debug)]
pub struct Generated {
    /// The crate's files.
    pub files: Vec<OutputFile>,
    /// The macros' method table.
    pub macro_table: OutputFile,
    /// The README with its handler tables regenerated.
    pub readme: String,
    /// The definitions emitted as raw JSON, as [`generate_reported`] lists them.
    pub untyped: Vec<String>,
}

/// Everything `cargo xtask codegen` writes: the crate, the macro table and the README with its
/// handler tables, from one load of the schema.
pub fn generate_all(settings: &Settings, readme_text: &str) -> Result<Generated> {
    let loaded = load_all(settings)?;
    let files = generate_from(settings, &loaded)?;
    let macro_table = macro_table_from(settings, &loaded)?;
    let readme = readme_from(&loaded.v1_model, loaded.v2.as_ref().map(|(_, model)| model), readme_text)?;
    Ok(Generated { files, macro_table, readme, untyped: loaded.untyped() })
}

/// A release's schema, loaded and classified: v1 with its merged model, and protocol v2 when
/// it is generated.
struct Loaded {
    v1: VersionFiles,
    v1_model: Model,
    v2: Option<(VersionFiles, Model)>,
}

impl Loaded {
    /// The definitions of both versions emitted as raw JSON, each with its version and reason.
    fn untyped(&self) -> Vec<String> {
        let models = std::iter::once(("v1", &self.v1_model)).chain(self.v2.iter().map(|(_, m)| ("v2", m)));
        models.flat_map(|(version, model)| model.untyped().into_iter().map(move |u| format!("{version} {u}"))).collect()
    }
}

/// Loads v1 and v2; v2 on a thread of its own, since the two are independent. Under
/// [`Settings::strict`], a definition without a typing rule fails the load.
fn load_all(settings: &Settings) -> Result<Loaded> {
    let loaded = std::thread::scope(|scope| {
        let v2 = scope.spawn(|| load_v2(settings));
        let v1 = load::load_version(&settings.schema_dir.join("v1"))?;
        let v1_model = build_model(&v1, settings.gating)?;
        let v2 = v2.join().map_err(|_| CodegenError::table("the thread loading protocol v2 panicked"))??;
        Ok(Loaded { v1, v1_model, v2 })
    })?;
    let untyped = loaded.untyped();
    if settings.strict && !untyped.is_empty() {
        return Err(CodegenError::Untyped(untyped));
    }
    Ok(loaded)
}

fn load_v2(settings: &Settings) -> Result<Option<(VersionFiles, Model)>> {
    let dir = settings.schema_dir.join("v2");
    if !settings.v2 || !dir.join("schema.json").exists() {
        return Ok(None);
    }
    // Protocol v2 is unstable as a whole upstream (the `v2` module is behind one feature);
    // its unstable schema's surface is gated like v1's, by the same features.
    let files = load::load_version(&dir)?;
    let model = build_model(&files, settings.gating)?;
    Ok(Some((files, model)))
}

fn generate_from(settings: &Settings, loaded: &Loaded) -> Result<Vec<OutputFile>> {
    let (v1, v1_model) = (&loaded.v1, &loaded.v1_model);
    let v2 = loaded.v2.as_ref().map(|(files, _)| files);
    let v2_model = loaded.v2.as_ref().map(|(_, model)| model);
    let preamble = preamble(settings, v1, v2);

    // Every Rust file as a list of pieces, each rendered on its own (see [`render`]).
    let mut files: Vec<(&str, Vec<Piece>)> = vec![
        ("src/v1/methods.rs", vec![tokens(|| methods_module(v1_model))]),
        ("src/v1/types.rs", types_pieces(v1_model, "v1")),
        ("src/v1/mod.rs", vec![tokens(|| Ok(version_mod("1")))]),
        ("src/lib.rs", vec![tokens(|| Ok(lib_rs(settings, v2_model.is_some())))]),
    ];
    if let Some(m) = v2_model {
        files.push(("src/v2/methods.rs", vec![tokens(move || methods_module(m))]));
        files.push(("src/v2/types.rs", types_pieces(m, "v2")));
        files.push(("src/v2/mod.rs", vec![tokens(|| Ok(version_mod("2")))]));
    }
    let mut out: Vec<OutputFile> = render(&files)?
        .into_iter()
        .zip(&files)
        .map(|(text, (path, _))| OutputFile { path: path.into(), contents: format!("{preamble}\n{text}") })
        .collect();
    // The hand-written modules, the same in every release (and in a vendored file).
    for (path, text) in [("src/serde_support.rs", SERDE_SUPPORT), ("src/decode.rs", DECODE)] {
        out.push(OutputFile { path: path.into(), contents: format!("{preamble}\n{text}") });
    }
    // `lossless`: hand-written, with the schema's union tags appended.
    let tags = union_tags(std::iter::once(v1_model).chain(v2_model));
    let tags = syn::parse2::<syn::File>(tags)
        .map_err(|e| CodegenError::Emit { file: "src/lossless.rs".into(), message: e.to_string() })?;
    out.push(OutputFile {
        path: "src/lossless.rs".into(),
        contents: format!("{preamble}\n{LOSSLESS}\n{}", prettyplease::unparse(&tags)),
    });
    out.push(OutputFile { path: "Cargo.toml".into(), contents: cargo_toml(settings, v2.is_some(), &preamble) });
    // The crate's page in the registry (its example is a doctest, see `lib_rs`).
    out.push(OutputFile { path: "README.md".into(), contents: CRATE_README.replace("TAG", &settings.tag) });
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// A program using a vendored file, compiled and run by `check-releases` (`CRATE` is the
/// scratch crate's name), and shown in the generated crate's docs.
const VENDORED_USE: &str = include_str!("../../templates/vendored_use.rs");
/// The generated crate's README (`TAG` is the release).
const CRATE_README: &str = include_str!("../../templates/crate_readme.md");
/// `serde_support`: the serde helpers of the generated code, and `Nullable`.
const SERDE_SUPPORT: &str = include_str!("../../templates/serde_support.rs");
/// The safe struct decoder a vendored file carries instead of `SERDE_SUPPORT`'s field tables.
const VENDORED_STRUCT_DECODER: &str = include_str!("../../templates/vendored_struct_decoder.rs");
/// `decode`: decoding with the JSON path of a failure.
const DECODE: &str = include_str!("../../templates/decode.rs");
/// `lossless`: typed views over raw JSON that keep what they do not change (its `UNION_TAGS`
/// table comes from the schema, see [`union_tags`]).
const LOSSLESS: &str = include_str!("../../templates/lossless.rs");

/// `serde_support` as a vendored file has it: the part marked "acp-types only" (the field-table
/// struct decoder, which holds the crate's only `unsafe` code, and its tests) replaced by
/// [`VENDORED_STRUCT_DECODER`].
fn vendored_serde_support() -> Result<String> {
    const OPEN: &str = "// <acp-types only>\n";
    const CLOSE: &str = "// </acp-types only>\n";
    let (Some(start), Some(end)) = (SERDE_SUPPORT.find(OPEN), SERDE_SUPPORT.find(CLOSE)) else {
        return Err(CodegenError::Emit {
            file: "serde_support".into(),
            message: format!("the template has no `{}` ... `{}` region", OPEN.trim(), CLOSE.trim()),
        });
    };
    Ok(format!("{}{}{}", &SERDE_SUPPORT[..start], VENDORED_STRUCT_DECODER, &SERDE_SUPPORT[end + CLOSE.len()..]))
}

/// `UNION_TAGS` of the `lossless` module: every tagged union's tag member with the names of
/// its variants (of all the models, each tag once), by which a merge tells a changed variant
/// from a changed member.
fn union_tags<'a>(models: impl Iterator<Item = &'a Model>) -> TokenStream {
    let mut tags: std::collections::BTreeMap<&str, std::collections::BTreeSet<&str>> = Default::default();
    for model in models {
        for item in &model.items {
            if let ItemKind::Tagged(t) = &item.kind {
                let names = tags.entry(t.tag.as_str()).or_default();
                names.extend(t.variants.iter().map(|v| v.wire.as_str()));
                names.extend(t.untagged_default.iter().filter_map(|d| d.wire.as_deref()));
            }
        }
    }
    let entries = tags.iter().map(|(tag, names)| {
        let names = names.iter();
        quote!((#tag, &[#(#names),*]))
    });
    quote! {
        /// The tag member of each of the schema's tagged unions, with its variant names
        /// (generated from the schema).
        const UNION_TAGS: &[(&str, &[&str])] = &[#(#entries),*];
    }
}

/// A part of a generated file: makes its code when called, on whichever thread renders it
/// (token streams and syntax trees are not `Send`).
type Piece<'a> = Box<dyn Fn() -> Result<Code> + Send + Sync + 'a>;

/// What a piece makes: tokens to parse, or items already parsed or built as syntax.
enum Code {
    Tokens(TokenStream),
    Items(syn::Result<Vec<syn::Item>>),
}

/// A piece made of tokens.
fn tokens<'a>(make: impl Fn() -> Result<TokenStream> + Send + Sync + 'a) -> Piece<'a> {
    Box::new(move || make().map(Code::Tokens))
}

/// Renders every file (tokens → `syn` → `prettyplease`, piece by piece) and returns their texts
/// in order. Parsing and formatting are most of the generator's time: one item at a time keeps
/// the token streams and syntax trees small (less memory to allocate and free than one tree
/// per file), and the pieces are shared out between the cores, the biggest first.
fn render(files: &[(&str, Vec<Piece>)]) -> Result<Vec<String>> {
    let pieces: Vec<(usize, &Piece)> =
        files.iter().enumerate().flat_map(|(file, (_, pieces))| pieces.iter().map(move |p| (file, p))).collect();
    // The files of one piece (the methods modules, each about as long to render as 40 items)
    // go first, so that no core is left with a long piece at the end.
    let mut order: Vec<usize> = (0..pieces.len()).collect();
    order.sort_by_key(|&i| files[pieces[i].0].1.len() > 1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || -> Vec<(usize, Result<String>)> {
        let mut done = Vec::new();
        loop {
            let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(&i) = order.get(n) else { return done };
            let (file, make) = pieces[i];
            let path = files[file].0;
            let (code, docs) = docs::deferred(make);
            let text = code.and_then(|code| {
                let file = match code {
                    Code::Tokens(tokens) => syn::parse2::<syn::File>(tokens),
                    Code::Items(items) => items.map(|items| syn::File { shebang: None, attrs: Vec::new(), items }),
                };
                let file = file.map_err(|e| CodegenError::Emit { file: path.to_owned(), message: e.to_string() })?;
                docs::expand(&tidy::struct_macros(&prettyplease::unparse(&file)), &docs)
            });
            done.push((i, text));
        }
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(pieces.len()).max(1);
    let results = std::thread::scope(|scope| -> Result<Vec<(usize, Result<String>)>> {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mut results = work();
        for h in helpers {
            results.extend(h.join().map_err(|_| CodegenError::table("a rendering thread panicked"))?);
        }
        Ok(results)
    })?;
    let mut texts: Vec<Option<Result<String>>> = (0..pieces.len()).map(|_| None).collect();
    for (i, text) in results {
        texts[i] = Some(text);
    }
    let mut out = vec![String::new(); files.len()];
    for ((file, _), text) in pieces.iter().zip(texts) {
        out[*file].push_str(&text.unwrap_or_else(|| Err(CodegenError::table("a piece was not rendered")))?);
    }
    Ok(out)
}

fn preamble(settings: &Settings, v1: &VersionFiles, v2: Option<&VersionFiles>) -> String {
    let mut lines = vec![
        format!("// @generated by `cargo xtask codegen` from the ACP JSON Schema, release {}.", settings.tag),
        "// Do not edit: change the generator (xtask/) or the pinned schema (schema/), then regenerate.".to_owned(),
    ];
    for files in std::iter::once(v1).chain(v2) {
        for (name, sha) in &files.sha256 {
            lines.push(format!("// {}/{name} sha256 {sha}", files.version));
        }
    }
    lines.join("\n") + "\n"
}

fn version_mod(version: &str) -> TokenStream {
    let mut doc = format!(" Protocol v{version}: the schema's types and its method table.");
    if version == "2" {
        doc.push_str(&format!(
            "\n\n The module is behind `{V2_FEATURE}`. Its unstable items are behind the same features \
             as the same capability in v1 (`unstable_nes`, ...), so using one in v2 takes both."
        ));
    }
    quote! {
        #![doc = #doc]
        mod methods;
        mod types;

        pub use methods::*;
        pub use types::*;
        /// Reads the `Option<Option<T>>` fields (absent, `null` or a value) in one call.
        pub use crate::serde_support::Nullable;
    }
}

/// The types module: its header, one piece per item, and the `json_schemas` function.
fn types_pieces<'a>(model: &'a Model, version: &'a str) -> Vec<Piece<'a>> {
    let mut pieces: Vec<Piece<'a>> = vec![tokens(move || {
        let doc = format!(" Every definition of the protocol {version} schema, as a Rust type.");
        Ok(quote! {
            #![doc = #doc]
            #![allow(clippy::large_enum_variant, clippy::doc_lazy_continuation, rustdoc::bare_urls, rustdoc::invalid_html_tags)]
            use crate::serde_support;
        })
    })];
    pieces.extend(
        model.items.iter().map(|i| -> Piece<'a> { Box::new(move || Ok(Code::Items(emit::item_syntax(i, model)))) }),
    );
    pieces.push(tokens(move || {
        let schemas = model.items.iter().map(|i| {
            let gate = emit::cfg(&i.gate);
            let name = naming::ident(&i.name);
            quote!(#gate generator.subschema_for::<#name>();)
        });
        Ok(quote! {
            /// Adds the JSON Schema of every type to `generator`'s definitions (`generator.definitions()`).
            #[cfg(feature = "schemars")]
            pub fn json_schemas(generator: &mut schemars::SchemaGenerator) {
                #(#schemas)*
            }
        })
    }));
    pieces.push(tokens(move || {
        // Every struct that derives `Default` (all its fields optional): `Type::default()`
        // must be that, not a setter of the same name.
        let defaults = model.items.iter().filter(|i| emit::derives_default(i)).map(|i| {
            let gate = emit::cfg(&i.gate);
            let name = naming::ident(&i.name);
            quote!(#gate assert_eq!(super::#name::default(), super::#name::new());)
        });
        Ok(quote! {
            #[cfg(test)]
            mod tests {
                /// `Type::default()` is the derived `Default` for every type that has one (no
                /// setter shadows it), and the same as `Type::new()`.
                #[test]
                fn default_is_the_derived_default() {
                    #(#defaults)*
                }
            }
        })
    }));
    pieces
}

fn methods_module(model: &Model) -> Result<TokenStream> {
    // The named codes every shape of `ErrorCode` has (a release may define it twice, stable
    // and unstable).
    let shapes: Vec<&Vec<ir::IntConst>> = model
        .items
        .iter()
        .filter_map(|i| match (&i.name[..], &i.kind) {
            ("ErrorCode", ItemKind::IntConsts { consts, .. }) => Some(consts),
            _ => None,
        })
        .collect();
    // Early schemas have no `ErrorCode`: their `Error.code` is a bare integer, and the
    // constructors use the JSON-RPC 2.0 codes directly.
    const JSON_RPC_CODES: [(&str, i64); 5] = [
        ("PARSE_ERROR", -32700),
        ("INVALID_REQUEST", -32600),
        ("METHOD_NOT_FOUND", -32601),
        ("INVALID_PARAMS", -32602),
        ("INTERNAL_ERROR", -32603),
    ];
    let (consts, named): (Vec<(String, i64)>, bool) = match shapes.split_first() {
        Some((first, rest)) => (
            first.iter().filter(|c| rest.iter().all(|o| o.contains(c))).map(|c| (c.name.clone(), c.value)).collect(),
            true,
        ),
        None => (JSON_RPC_CODES.iter().map(|(n, v)| (n.to_string(), *v)).collect(), false),
    };
    if !consts.iter().any(|(name, _)| name == "METHOD_NOT_FOUND") {
        return Err(CodegenError::table("`ErrorCode` has no \"Method not found\" code"));
    }
    let ctors = consts.iter().map(|(name, value)| {
        let f = naming::ident(&name.to_ascii_lowercase());
        let message = naming::sentence(name);
        let code = if named {
            let id = quote::format_ident!("{}", name);
            quote!(ErrorCode::#id)
        } else {
            let v = proc_macro2::Literal::i64_unsuffixed(*value);
            quote!(#v)
        };
        let d = format!(" `{value}` ({message}), with the standard message.");
        quote!(#[doc = #d] pub fn #f() -> Self { Error::new(#code, #message) })
    });
    // `Error.code` is `ErrorCode`, whose `Display` adds the code's name, or a bare integer.
    let code = if named { quote!(self.code.0) } else { quote!(self.code) };
    let body = emit::methods(model);
    Ok(quote! {
        //! Method names, the request / response / notification enums of each direction, and the
        //! `Agent` and `Client` traits with their dispatch.
        // The envelopes hold the params and results by value, as the types hold their fields:
        // boxing the large ones would cost an allocation per message and change the API.
        #![allow(clippy::large_enum_variant)]
        use super::types::*;
        use crate::serde_support;

        impl Error {
            #(#ctors)*
        }

        /// The code and the message: `-32602 Invalid params`.
        impl std::fmt::Display for Error {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{} {}", #code, self.message)
            }
        }

        impl std::error::Error for Error {}

        #body
    })
}

fn lib_rs(settings: &Settings, v2: bool) -> TokenStream {
    let doc = format!(
        " Agent Client Protocol types and method traits, generated from the ACP JSON Schema \
         (release {}).\n\n The protocol v1 items are at the crate root (and in [`v1`]); \
         unstable parts of the schema are behind cargo features, and protocol v2 is in `v2` \
         behind `{V2_FEATURE}`. Every union has a fallback variant, so messages from a newer \
         peer decode.\n\n \
         # Fields that may be absent or `null`\n\n \
         A member that the schema makes optional and nullable is an `Option<Option<T>>`, so \
         that a message decodes and is written back with absent and `null` kept apart. \
         [`Nullable`] reads it in one call:\n\n \
         ```\n \
         use acp_types::{{ClientCapabilities, Nullable}};\n\n \
         let caps: ClientCapabilities = serde_json::from_str(r#\"{{\"session\": {{}}}}\"#).unwrap();\n \
         assert!(caps.session.value().is_some());\n\n \
         let caps: ClientCapabilities = serde_json::from_str(r#\"{{\"session\": null}}\"#).unwrap();\n \
         assert!(caps.session.value().is_none() && caps.session.is_null());\n \
         assert_eq!(serde_json::to_string(&caps).unwrap(), r#\"{{\"session\":null}}\"#);\n \
         ```\n\n \
         # Decoding errors with the path of the failing value\n\n \
         [`decode::from_str`] and [`decode::from_slice`] decode as serde_json's functions do, and \
         a [`DecodeError`] names the JSON path of the value that did not fit:\n\n \
         ```\n \
         let text = r#\"{{\"sessionId\": \"s\", \"prompt\": [{{\"type\": \"text\", \"text\": 7}}]}}\"#;\n \
         let error = acp_types::decode::from_str::<acp_types::PromptRequest>(text).unwrap_err();\n \
         assert_eq!(error.path(), Some(\"prompt[0]\"));\n \
         assert!(error.to_string().starts_with(\"at prompt[0]: \"), \"{{error}}\");\n \
         ```\n\n \
         # Proxies: changing a message without losing what the types do not know\n\n \
         The types drop members they do not know when they decode. A [`Lossless`] view \
         decodes a message and keeps its JSON: written back unchanged, it is the same bytes; \
         changed through the view, it keeps every member the change did not touch, unknown \
         ones and `_meta` included (see [`lossless`]).\n\n \
         # serde_json's features\n\n \
         `float_roundtrip` (on by default) turns on serde_json's exact float parsing, so that a \
         number in free-form JSON (`_meta`, `rawInput`) survives a decode and re-encode bit for \
         bit; `preserve_order` (off by default) makes free-form objects keep the order their keys \
         came in when written back, where they are otherwise written in sorted order. Both change \
         serde_json for the whole build, so each is the dependent's choice; the objects whose \
         order the protocol cares about are [`serde_support::OrderedMap`]s, ordered either way.\n\n \
         # Serving and calling: `acp-rpc`\n\n \
         This crate has the messages and the traits, and no transport. To write an agent, a client \
         or a proxy, depend on `acp-rpc`: JSON-RPC over stdio or any stream, ACP's concurrency and \
         cancellation rules, and `#[acp_agent]` / `#[acp_client]`; it re-exports this crate as \
         `acp_rpc::acp_types`.\n\n \
         # Vendoring the types instead\n\n \
         A project that would rather not depend on this crate can keep the types in its own tree: \
         `cargo xtask vendor --out src/acp.rs` (run in the ACP toolchain's source tree; \
         `--features`, `--derive` and `--types-only` choose what goes in) writes one file with the \
         v1 types, the method enums and traits, and this crate's helpers (`decode`, `Nullable`, \
         `lossless`), depending on serde and serde_json only. The project declares it as a module \
         and uses it with the paths of this crate's root; CI runs this program against a freshly \
         vendored file:\n\n \
         ```\n \
         // In the project, `mod acp;` declares the vendored src/acp.rs; this crate stands in for it here.\n \
         use acp_types as acp;\n\n \
         {vendored_use}\n \
         ```",
        settings.tag,
        vendored_use = VENDORED_USE
            .replace("//! A vendored file's helpers, used as a project would.\n", "")
            .replace("CRATE::acp::", "acp::")
            .trim_end()
            .replace('\n', "\n "),
    );
    let v2_mod = if v2 {
        quote!(
            #[cfg(feature = #V2_FEATURE)]
            pub mod v2;
        )
    } else {
        quote!()
    };
    let gates = feature_gates(settings, v2);
    quote! {
        #![doc = #doc]
        #![cfg_attr(docsrs, feature(doc_cfg))]
        #![warn(missing_docs)]

        pub mod decode;
        pub mod lossless;
        pub mod serde_support;
        pub mod v1;
        #v2_mod

        /// The README's example, run as a doctest so that it cannot go stale.
        #[cfg(doctest)]
        #[doc = include_str!("../README.md")]
        pub struct ReadmeDoctest;

        pub use decode::DecodeError;
        pub use lossless::Lossless;
        pub use serde_support::{Nullable, UnknownVariant};
        pub use v1::*;

        #gates
    }
}

/// `feature_gates::FEATURE! { { items } { otherwise } }`: `items` when this crate is built with
/// FEATURE, `otherwise` when not. `#[acp_agent]` / `#[acp_client]` expand in the user's crate,
/// where `#[cfg(feature = ..)]` would test the user's own features; these macros answer for
/// the features acp-types really has.
fn feature_gates(settings: &Settings, v2: bool) -> TokenStream {
    let mut features = features::feature_names(settings.gating);
    // `#[acp_agent(v2)]` needs the v2 module itself.
    if v2 {
        features.push(V2_FEATURE);
    }
    if features.is_empty() {
        return quote!();
    }
    let gates = features.iter().map(|f| {
        let name = quote::format_ident!("{f}");
        quote! {
            #[cfg(feature = #f)]
            pub use crate::__acp_feature_on as #name;
            #[cfg(not(feature = #f))]
            pub use crate::__acp_feature_off as #name;
        }
    });
    quote! {
        #[doc(hidden)]
        #[macro_export]
        macro_rules! __acp_feature_on {
            ({ $($items:tt)* } { $($otherwise:tt)* }) => { $($items)* };
        }

        #[doc(hidden)]
        #[macro_export]
        macro_rules! __acp_feature_off {
            ({ $($items:tt)* } { $($otherwise:tt)* }) => { $($otherwise)* };
        }

        /// Which unstable features this build has, for the expansion of the runtime's macros.
        #[doc(hidden)]
        pub mod feature_gates {
            #(#gates)*
        }
    }
}

fn cargo_toml(settings: &Settings, v2: bool, preamble: &str) -> String {
    let preamble = preamble.replace("// ", "# ");
    let mut features: Vec<String> = Vec::new();
    let gated: Vec<&str> = features::feature_names(settings.gating);
    let mut umbrella: Vec<String> = gated.iter().map(|f| format!("\"{f}\"")).collect();
    if v2 {
        umbrella.push(format!("\"{V2_FEATURE}\""));
    }
    features.push("default = [\"float_roundtrip\"]".into());
    features.push("# `JsonSchema` for every type (schemars 1)".into());
    features.push("schemars = [\"dep:schemars\"]".into());
    features.push(
        "# serde_json's exact float parsing: a number in free-form JSON (`_meta`, `rawInput`) survives a\n\
         # decode and re-encode bit for bit (without it, some long floats read 1 ULP off)"
            .into(),
    );
    features.push("float_roundtrip = [\"serde_json/float_roundtrip\"]".into());
    features.push(
        "# serde_json's `Map` keeps insertion order: unknown variants, `_meta` and other free-form objects\n\
         # are written back in the order their keys came (without it, in sorted order)"
            .into(),
    );
    features.push("preserve_order = [\"serde_json/preserve_order\"]".into());
    features.push(format!("{} = [{}]", features::UMBRELLA, umbrella.join(", ")));
    for f in gated {
        features.push(format!("{f} = []"));
    }
    if v2 {
        features.push(format!("{V2_FEATURE} = []"));
    }
    if settings.gating == features::Gating::Table {
        for (name, fate) in features::RETIRED {
            features.push(format!(
                "# Gates nothing any more, kept so that crates naming it still build: {fate}\n{name} = []"
            ));
        }
    }
    let (package, deps) = if settings.standalone {
        (
            "version = \"0.0.0\"\nedition = \"2024\"\npublish = false",
            "serde = { version = \"1\", features = [\"derive\"] }\nserde_json = { version = \"1\", features = [\"raw_value\"] }\nschemars = { version = \"1\", optional = true }\n\n[workspace]\n",
        )
    } else {
        (
            "version.workspace = true\nedition.workspace = true\nrust-version.workspace = true\nlicense.workspace = true\n\
             readme = \"README.md\"\n\
             keywords = [\"acp\", \"agent-protocol\", \"json-schema\", \"ai\", \"editor\"]\n\
             categories = [\"api-bindings\", \"encoding\", \"text-editors\"]",
            "serde = { workspace = true }\nserde_json = { workspace = true }\nschemars = { version = \"1.0.4\", optional = true }\n\n\
             # docs.rs: every feature, each gated item labelled with the features it needs.\n\
             [package.metadata.docs.rs]\nall-features = true\nrustdoc-args = [\"--cfg\", \"docsrs\"]\n",
        )
    };
    let documentation = if settings.standalone {
        String::new()
    } else {
        format!("documentation = \"https://docs.rs/{}\"\n", settings.package)
    };
    format!(
        "{preamble}[package]\nname = \"{}\"\ndescription = \"Agent Client Protocol types and method traits, generated from the ACP JSON Schema\"\n{documentation}{package}\n\n[features]\n{}\n\n[dependencies]\n{deps}",
        settings.package,
        features.join("\n")
    )
}

/// One self-contained Rust file with the v1 types and methods as compiled with `features`
/// (no cargo features left in it), depending only on serde and serde_json: for projects that
/// keep the protocol types in their own tree. `with_traits` keeps the method enums and traits.
pub fn vendor(settings: &Settings, features: &[String], with_traits: bool, derives: &[String]) -> Result<Vendored> {
    let derives: Vec<syn::Path> = derives
        .iter()
        .map(|d| {
            syn::parse_str(d).map_err(|e| CodegenError::table(&format!("--derive: `{d}` is not a derive path: {e}")))
        })
        .collect::<Result<_>>()?;
    let v1 = load::load_version(&settings.schema_dir.join("v1"))?;
    let mut selected: std::collections::BTreeSet<String> = features.iter().cloned().collect();
    if selected.contains(features::UMBRELLA) {
        selected.extend(features::feature_names(settings.gating).into_iter().map(str::to_owned));
    }
    for f in &selected {
        if f != features::UMBRELLA && !features::feature_names(settings.gating).contains(&f.as_str()) {
            return Err(CodegenError::table(&format!("unknown feature `{f}`")));
        }
    }
    let model = build_model(&v1, settings.gating)?.select(&selected);
    let items = model.items.iter().map(|i| emit::item(i, &model));
    let methods = if with_traits {
        let full = methods_module(&model)?;
        // Drop the module's `use` lines: everything is in one module here.
        let file: syn::File =
            syn::parse2(full).map_err(|e| CodegenError::Emit { file: "vendor".into(), message: e.to_string() })?;
        let kept = file.items.into_iter().filter(|i| !matches!(i, syn::Item::Use(_)));
        quote!(#(#kept)*)
    } else {
        TokenStream::new()
    };
    let support: syn::File = syn::parse_str(&vendored_serde_support()?)
        .map_err(|e| CodegenError::Emit { file: "serde_support".into(), message: e.to_string() })?;
    let support_items = &support.items;
    let decode: syn::File =
        syn::parse_str(DECODE).map_err(|e| CodegenError::Emit { file: "decode".into(), message: e.to_string() })?;
    let decode_items = &decode.items;
    let lossless: syn::File =
        syn::parse_str(LOSSLESS).map_err(|e| CodegenError::Emit { file: "lossless".into(), message: e.to_string() })?;
    let lossless_items = &lossless.items;
    let tags = union_tags(std::iter::once(&model));
    let doc = format!(
        " Agent Client Protocol v1 types, vendored from the ACP JSON Schema (release {}) with features [{}]. Depends only on serde (derive) and serde_json (with its `raw_value` feature).",
        settings.tag,
        selected.iter().cloned().collect::<Vec<_>>().join(", ")
    );
    let tokens = quote! {
        #![doc = #doc]
        // `dead_code`: a project uses some of the types and helpers, and the file is often a
        // private module.
        #![allow(dead_code, clippy::large_enum_variant, clippy::doc_lazy_continuation, rustdoc::bare_urls, rustdoc::invalid_html_tags)]

        /// Serde helpers shared by the types below, and [`Nullable`].
        pub mod serde_support {
            #(#support_items)*
        }
        /// Decoding JSON text into these types with the JSON path of a failure:
        /// `decode::from_str::<PromptRequest>(text)`, whose error's `path()` is `prompt[0].type`.
        pub mod decode {
            #(#decode_items)*
        }
        /// Typed views over raw JSON that write back every member they were not asked to
        /// change (unknown ones and `_meta` included): `lossless::Lossless::<PromptRequest>::map(
        /// params, |request| ...)` for a proxy that rewrites a message. Needs serde_json's
        /// `raw_value` feature.
        pub mod lossless {
            #(#lossless_items)*
            #tags
        }
        // For users of the file; a private module may not use them.
        #[allow(unused_imports)]
        pub use decode::DecodeError;
        #[allow(unused_imports)]
        pub use lossless::Lossless;
        #[allow(unused_imports)]
        pub use serde_support::{Nullable, UnknownVariant};

        #(#items)*
        #methods
    };
    let mut file = syn::parse2::<syn::File>(tokens)
        .map_err(|e| CodegenError::Emit { file: "vendor".into(), message: e.to_string() })?;
    strip_schemars(&mut file.items);
    let derives::Added { notes, preamble: derive_lines, warnings } = derives::add(&mut file.items, &derives)?;
    let mut preamble = format!(
        "// @generated by `cargo xtask vendor` from the ACP JSON Schema, release {}.\n// Do not edit: regenerate with `cargo xtask vendor`.\n",
        settings.tag
    );
    for line in &derive_lines {
        preamble.push_str(&comment_lines(&format!("--{line}."), 100));
    }
    let text = format!("{preamble}\n{}", tidy::struct_macros(&prettyplease::unparse(&file)));
    Ok(Vendored { text, notes, warnings })
}

/// `text` as `//` comment lines of at most `width` characters (a longer word stays whole).
fn comment_lines(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::from("//");
    for word in text.split(' ') {
        if line.len() > 2 && line.len() + 1 + word.len() > width {
            out.push_str(&line);
            out.push('\n');
            line = String::from("//  ");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// A vendored file, one line per `--derive` saying which types it went on (the file's preamble
/// lists every type left out), and warnings.
#[derive(Debug, Clone)]
pub struct Vendored {
    /// The file's contents.
    pub text: String,
    /// One line per `--derive`: how many types it went on, and the first few left off.
    pub notes: Vec<String>,
    /// A `--derive` that went on no type.
    pub warnings: Vec<String>,
}

/// The book's handler page (`docs/book/src/handlers.md`) with its tables regenerated (see
/// [`macro_table::readme_tables`]).
pub fn readme(settings: &Settings, readme: &str) -> Result<String> {
    let loaded = load_all(settings)?;
    readme_from(&loaded.v1_model, loaded.v2.as_ref().map(|(_, model)| model), readme)
}

fn readme_from(v1: &Model, v2: Option<&Model>, readme: &str) -> Result<String> {
    macro_table::splice_readme(readme, &macro_table::readme_tables(v1, v2)).ok_or_else(|| {
        CodegenError::table(&format!(
            "{} has no `<!-- handlers:begin ... -->` / `<!-- handlers:end -->` markers",
            stamp::HANDLER_TABLES_FILE
        ))
    })
}

/// `macros/src/table.rs`: the handler tables of the attribute macros (pinned release, v1 and v2).
pub fn macro_table(settings: &Settings) -> Result<OutputFile> {
    macro_table_from(settings, &load_all(settings)?)
}

fn macro_table_from(settings: &Settings, loaded: &Loaded) -> Result<OutputFile> {
    let v1 = version_table(&loaded.v1, &loaded.v1_model)?;
    let v2 = loaded.v2.as_ref().map(|(files, model)| version_table(files, model)).transpose()?;
    let tokens = macro_table::table(&v1, v2.as_ref());
    let file = syn::parse2::<syn::File>(tokens)
        .map_err(|e| CodegenError::Emit { file: "macros/src/table.rs".into(), message: e.to_string() })?;
    let preamble = preamble(settings, &loaded.v1, loaded.v2.as_ref().map(|(files, _)| files));
    Ok(OutputFile { path: "src/table.rs".into(), contents: format!("{preamble}\n{}", prettyplease::unparse(&file)) })
}

fn version_table<'a>(files: &VersionFiles, model: &'a Model) -> Result<macro_table::VersionTable<'a>> {
    let schema = files.schema_unstable.as_ref().unwrap_or(&files.schema);
    let defs = schema
        .get("$defs")
        .and_then(serde_json::Value::as_object)
        .ok_or_else(|| CodegenError::Input { path: files.dir.clone(), message: "no `$defs` object".into() })?;
    Ok(macro_table::VersionTable {
        model,
        agent_caps: macro_table::capabilities(defs, "InitializeResponse", model, ir::Side::Agent),
        client_caps: macro_table::capabilities(defs, "InitializeRequest", model, ir::Side::Client),
        agent_groups: macro_table::groups(defs, "InitializeResponse", model, ir::Side::Agent),
    })
}

/// A vendored file has no `schemars` feature: drops the `JsonSchema` impls and derives, also
/// inside inline modules (`serde_support`).
fn strip_schemars(items: &mut Vec<syn::Item>) {
    let mentions_schemars = |attr: &syn::Attribute| {
        (attr.path().is_ident("cfg") || attr.path().is_ident("cfg_attr"))
            && attr.meta.to_token_stream().to_string().contains("\"schemars\"")
    };
    items.retain(|item| match item {
        syn::Item::Impl(i) => !i.attrs.iter().any(|a| a.path().is_ident("cfg") && mentions_schemars(a)),
        _ => true,
    });
    for item in items {
        let attrs = match item {
            syn::Item::Struct(s) => &mut s.attrs,
            syn::Item::Enum(e) => &mut e.attrs,
            syn::Item::Mod(syn::ItemMod { content: Some((_, inner)), .. }) => {
                strip_schemars(inner);
                continue;
            }
            _ => continue,
        };
        attrs.retain(|a| !mentions_schemars(a));
    }
}

/// Writes the files under `root`, or with `check`, lists the ones that differ.
pub fn write_or_check(root: &Path, files: &[OutputFile], check: bool) -> std::io::Result<Vec<PathBuf>> {
    let mut stale = Vec::new();
    for f in files {
        let path = root.join(&f.path);
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() == Some(f.contents.as_str()) {
            continue;
        }
        stale.push(path.clone());
        if !check {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(&path, &f.contents)?;
        }
    }
    Ok(stale)
}
