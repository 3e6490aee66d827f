//! Typed views over raw JSON that write back every member they were not asked to change: for
//! proxies and other components in the middle of a chain.
//!
//! The generated types keep what the schema names and drop the rest: an unknown member of a
//! known struct (a newer peer's field, an extension's `x-...`) is not in the decoded value, so
//! decoding a message and encoding it again loses it. A [`Lossless<T>`] holds the original JSON
//! next to the decoded `T`; reading goes through `Deref<Target = T>`, changing through
//! `DerefMut` (or [`Lossless::edit`]), and encoding it ([`Lossless::to_raw`],
//! [`Lossless::to_json_string`], or `Serialize`) writes:
//!
//! - **never changed**: the original text, byte for byte (from a `&str`, without the whitespace
//!   around the value);
//! - **changed**: `merge(original, projection, new)`, where the *projection* is what `T` knows
//!   of the original (`T` encoded as it was decoded, taken when the view is first borrowed
//!   mutably) and *new* is `T` encoded after the change. When the two are equal (a change
//!   that was undone, or `edit()` without a change), the original text again.
//!
//! # The merge, value by value
//!
//! `merge(o, p, n)` for an original value `o`, its projection `p` and the new value `n`:
//!
//! 1. `p == n`: nothing `T` knows of this value changed, so it is `o` itself, **as it was
//!    written** (unknown members at any depth, number spellings, member order, escapes).
//! 2. `p`, `n` and `o` are objects, and no union variant changed (see 4): every member of `o`,
//!    in `o`'s order, then the members only `n` has:
//!    - a member in `o`, `p` and `n`: `merge(o[k], p[k], n[k])`;
//!    - in `o` and `p`, not in `n`: the user removed it, left out;
//!    - in `o`, not in `p` (unknown to `T`, or a value `T` did not keep): `o[k]` as written,
//!      unless `n` has it (the user set it): then `n[k]`;
//!    - in `n`, not in `o`: `n[k]`, unless `p[k] == n[k]` (a default `T` writes that the
//!      original did not have: still left out).
//! 3. `p`, `n` and `o` are arrays: each element of `n` is paired with an element of `p`, and
//!    through it with the original element it came from; a paired element is
//!    `merge(o[i], p[j], n[k])`, an unpaired one is `n[k]`. Pairs are found in this order:
//!    the leading elements equal in `n` and `p`, the trailing ones, the longest common
//!    subsequence of the equal elements in between, equal elements that moved, and then, between
//!    two pairs found so far, the remaining elements of `n` and `p` one to one in order (an
//!    element changed in place). So inserting or removing a prompt content block keeps the
//!    unknown members of the others, and changing a block keeps its own. Of equal elements in a
//!    row, the first ones are taken as kept (removing one of two equal blocks keeps the first
//!    one's unknown members). Elements of `o` that `T` dropped when decoding
//!    (`x-deserialize-skip-invalid-items`) are kept, after the nearest element before them in
//!    `o` that is still there (or first); the original elements behind `p` are then told apart
//!    by which of them `p`'s elements can be a reading of, and when that fails the array is
//!    written as `n`.
//! 4. Otherwise (a scalar changed, a value changed type, or a union changed variant): `n`. A
//!    union variant changed when a tag member of the schema's tagged unions (`type`,
//!    `sessionUpdate`, `outcome`, ...) holds two different variant names in `p` and `n`: the
//!    new variant does not inherit the old one's unknown members. Unions told apart by shape
//!    alone (untagged) have no tag: their unknown members carry over to the new shape.
//!
//! # Member order, whitespace and cost
//!
//! Values written from `o` keep their bytes; the objects on the path to a change are written
//! member by member (the original's members in their order, then new ones), and values written
//! from `n` in the order serde_json's `Map` keeps: sorted by key without serde_json's
//! `preserve_order` feature, the struct's field order with it. Whitespace inside values taken
//! from `o` is kept; the rest is compact. Decoding costs what decoding `T` costs (plus copying
//! the text, and a validating pass when it is given as `&str`); reading never costs more; the
//! first mutable borrow encodes `T` once (the projection), and encoding a changed view encodes
//! `T` again and re-reads only the objects and arrays on the path to a change.
//!
//! # Example: a proxy adding context to a prompt
//!
//! ```
//! use acp_types::lossless::Lossless;
//! use acp_types::{ContentBlock, PromptRequest, TextContent};
//! use serde_json::json;
//!
//! // A client that knows more than this proxy: an unknown member on a content block, `_meta`,
//! // and an unknown top-level member.
//! let params = r#"{"sessionId":"s1","prompt":[{"type":"text","text":"Fix the bug","x-cursor":{"line":3}}],"_meta":{"trace":"4bf9"},"x-editor":"zed"}"#;
//!
//! // Forwarded untouched: the same bytes.
//! let view = Lossless::<PromptRequest>::from_raw(params)?;
//! assert_eq!(view.prompt.len(), 1);
//! assert_eq!(view.to_raw()?.get(), params);
//!
//! // Changed through the typed view: only the change differs.
//! let edited = Lossless::<PromptRequest>::map(params, |request| {
//!     request.prompt.insert(0, ContentBlock::from(TextContent::new("The project uses Rust 2024.")));
//! })?;
//! let edited: serde_json::Value = serde_json::from_str(edited.get())?;
//! assert_eq!(
//!     edited,
//!     json!({
//!         "sessionId": "s1",
//!         "prompt": [
//!             {"type": "text", "text": "The project uses Rust 2024."},
//!             {"type": "text", "text": "Fix the bug", "x-cursor": {"line": 3}}
//!         ],
//!         "_meta": {"trace": "4bf9"},
//!         "x-editor": "zed"
//!     })
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A message typed by its method (an envelope enum) decodes with [`Lossless::decode_with`]:
//! `Lossless::decode_with(params, |de| ClientRequest::decode(method, de)?.ok_or_else(...))`.

use std::borrow::Cow;
use std::ops::{Deref, DerefMut};

use serde::de::DeserializeOwned;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::decode::{self, DecodeError};

/// A decoded `T` and the JSON it was decoded from; encodes as the original where nothing
/// changed (see the [module documentation](self) for the rules).
///
/// `Deref` reads the value; `DerefMut` and [`edit`](Lossless::edit) mark it changed (the first
/// such borrow encodes `T` once, to know later what changed).
pub struct Lossless<T> {
    original: Box<RawValue>,
    value: T,
    /// `None` until the first mutable borrow; then what `T` knew of the original, encoded
    /// (or why encoding failed, reported when the view is encoded).
    projection: Option<Result<Value, String>>,
}

/// Why [`Lossless::map`] failed: the input did not decode as `T`, or the result did not encode.
#[derive(Debug)]
pub enum LosslessError {
    /// The input is not JSON, or not a `T`; with the JSON path of the value that did not fit.
    Decode(DecodeError),
    /// `T` could not be encoded (a map with non-string keys, a failing `Serialize`).
    Encode(serde_json::Error),
}

impl std::fmt::Display for LosslessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LosslessError::Decode(e) => write!(f, "cannot decode: {e}"),
            LosslessError::Encode(e) => write!(f, "cannot encode: {e}"),
        }
    }
}

impl std::error::Error for LosslessError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LosslessError::Decode(e) => Some(e),
            LosslessError::Encode(e) => Some(e),
        }
    }
}

impl From<DecodeError> for LosslessError {
    fn from(e: DecodeError) -> Self {
        LosslessError::Decode(e)
    }
}

impl From<serde_json::Error> for LosslessError {
    fn from(e: serde_json::Error) -> Self {
        LosslessError::Encode(e)
    }
}

/// JSON that a [`Lossless`] can be made from: text (`&str`, `String`), raw JSON (`&RawValue`,
/// `Box<RawValue>`, which need no validating pass) or a `&Value` (whose original text is its
/// compact encoding).
pub trait JsonInput {
    /// The JSON as an owned raw value; invalid text fails with the path where it broke off.
    fn into_raw_json(self) -> Result<Box<RawValue>, DecodeError>;
}

impl JsonInput for &str {
    fn into_raw_json(self) -> Result<Box<RawValue>, DecodeError> {
        serde_json::from_str::<&RawValue>(self).map(RawValue::to_owned).map_err(|e| DecodeError::locate(self, e))
    }
}

impl JsonInput for String {
    fn into_raw_json(self) -> Result<Box<RawValue>, DecodeError> {
        self.as_str().into_raw_json()
    }
}

impl JsonInput for &String {
    fn into_raw_json(self) -> Result<Box<RawValue>, DecodeError> {
        self.as_str().into_raw_json()
    }
}

impl JsonInput for &RawValue {
    fn into_raw_json(self) -> Result<Box<RawValue>, DecodeError> {
        Ok(self.to_owned())
    }
}

impl JsonInput for Box<RawValue> {
    fn into_raw_json(self) -> Result<Box<RawValue>, DecodeError> {
        Ok(self)
    }
}

impl JsonInput for &Box<RawValue> {
    fn into_raw_json(self) -> Result<Box<RawValue>, DecodeError> {
        Ok(self.as_ref().to_owned())
    }
}

impl JsonInput for &Value {
    fn into_raw_json(self) -> Result<Box<RawValue>, DecodeError> {
        serde_json::value::to_raw_value(self).map_err(|e| DecodeError::locate("", e))
    }
}

impl<T: DeserializeOwned> Lossless<T> {
    /// Decodes `json` as `T`, keeping the JSON; fails with the path of the value that did not
    /// fit, as [`decode::from_str`] does.
    pub fn from_raw(json: impl JsonInput) -> Result<Self, DecodeError> {
        Self::decode_with(json, |de| T::deserialize(de))
    }
}

impl<T: DeserializeOwned> Lossless<T> {
    /// [`from_raw`](Lossless::from_raw) for JSON already held in a `Box<RawValue>`, handed
    /// back when it does not decode (so that it can still be passed on as it came).
    pub fn from_box(json: Box<RawValue>) -> Result<Self, (DecodeError, Box<RawValue>)> {
        let decoded = decode::from_str_with(json.get(), |de| {
            let value = T::deserialize(&mut *de)?;
            de.end()?;
            Ok(value)
        });
        match decoded {
            Ok(value) => Ok(Lossless { original: json, value, projection: None }),
            Err(e) => Err((e, json)),
        }
    }
}

impl<T> Lossless<T> {
    /// Decodes `json` with a decoder of one's own (an envelope enum by its method name), keeping
    /// the JSON. Input after the value fails, as with [`from_raw`](Lossless::from_raw).
    pub fn decode_with(
        json: impl JsonInput,
        decode: impl for<'a> FnOnce(
            &mut serde_json::Deserializer<serde_json::de::StrRead<'a>>,
        ) -> Result<T, serde_json::Error>,
    ) -> Result<Self, DecodeError> {
        let original = json.into_raw_json()?;
        let value = decode::from_str_with(original.get(), |de| {
            let value = decode(&mut *de)?;
            de.end()?;
            Ok(value)
        })?;
        Ok(Lossless { original, value, projection: None })
    }

    /// The JSON the view was decoded from.
    pub fn original(&self) -> &RawValue {
        &self.original
    }

    /// Whether the value was borrowed mutably (it may still equal the original: encoding then
    /// writes the original).
    pub fn is_edited(&self) -> bool {
        self.projection.is_some()
    }

    /// The typed value, without the original JSON.
    pub fn into_inner(self) -> T {
        self.value
    }
}

impl<T: Serialize> Lossless<T> {
    /// The value, to change: the same as `DerefMut`.
    pub fn edit(&mut self) -> &mut T {
        if self.projection.is_none() {
            self.projection = Some(serde_json::to_value(&self.value).map_err(|e| e.to_string()));
        }
        &mut self.value
    }

    /// The JSON to send on: the original if nothing changed, else the merge (see the
    /// [module documentation](self)).
    pub fn to_raw(&self) -> Result<Box<RawValue>, serde_json::Error> {
        match self.projection {
            None => Ok(self.original.clone()),
            Some(_) => serde_json::value::to_raw_value(self),
        }
    }

    /// [`to_raw`](Lossless::to_raw), without copying the original when nothing changed.
    pub fn into_raw(self) -> Result<Box<RawValue>, serde_json::Error> {
        match self.projection {
            None => Ok(self.original),
            Some(_) => serde_json::value::to_raw_value(&self),
        }
    }

    /// [`to_raw`](Lossless::to_raw) as a `String`.
    pub fn to_json_string(&self) -> Result<String, serde_json::Error> {
        match self.projection {
            None => Ok(self.original.get().to_owned()),
            Some(_) => serde_json::to_string(self),
        }
    }
}

impl<T: DeserializeOwned + Serialize> Lossless<T> {
    /// Decodes `json` as `T`, lets `change` change it, and encodes the result losslessly: the
    /// shortest path for a proxy that rewrites a message.
    pub fn map(json: impl JsonInput, change: impl FnOnce(&mut T)) -> Result<Box<RawValue>, LosslessError> {
        let mut view = Self::from_raw(json)?;
        change(view.edit());
        Ok(view.into_raw()?)
    }
}

impl<T> Deref for Lossless<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Serialize> DerefMut for Lossless<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.edit()
    }
}

impl<T: Clone> Clone for Lossless<T> {
    fn clone(&self) -> Self {
        Lossless { original: self.original.clone(), value: self.value.clone(), projection: self.projection.clone() }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Lossless<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lossless")
            .field("value", &self.value)
            .field("original", &self.original)
            .field("edited", &self.is_edited())
            .finish()
    }
}

/// Writes the original, or the merge once the value was borrowed mutably. For serde_json's
/// serializers (to text, or to a `Value`), which know raw JSON; other formats are not supported.
impl<T: Serialize> Serialize for Lossless<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let projection = match &self.projection {
            None => return self.original.serialize(serializer),
            Some(Ok(projection)) => projection,
            Some(Err(e)) => return Err(serde::ser::Error::custom(e)),
        };
        let new = serde_json::to_value(&self.value).map_err(serde::ser::Error::custom)?;
        Merged { original: &self.original, projection, new: &new }.serialize(serializer)
    }
}

/// Reads the raw JSON and decodes `T` from it (with serde_json's deserializers only, which
/// can hand out raw JSON); an error names the path inside the value.
impl<'de, T: DeserializeOwned> Deserialize<'de> for Lossless<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let original = Box::<RawValue>::deserialize(deserializer)?;
        Self::from_raw(original).map_err(serde::de::Error::custom)
    }
}

// ---- the merge ----------------------------------------------------------------------------------

/// `merge(original, projection, new)` as a `Serialize`, so that it writes straight into the
/// output (and into a `RawValue` without a validating pass).
struct Merged<'a> {
    original: &'a RawValue,
    projection: &'a Value,
    new: &'a Value,
}

impl Serialize for Merged<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.projection == self.new {
            return self.original.serialize(serializer);
        }
        match (self.projection, self.new) {
            (Value::Object(p), Value::Object(n)) if !variant_changed(p, n) => {
                match serde_json::from_str::<Members>(self.original.get()) {
                    Ok(Members(members)) => merge_objects(serializer, &members, p, n),
                    Err(_) => self.new.serialize(serializer),
                }
            }
            (Value::Array(p), Value::Array(n)) => match serde_json::from_str::<Vec<&RawValue>>(self.original.get()) {
                Ok(original) => match pair_elements(&original, p, n) {
                    Some(slots) => {
                        let mut seq = serializer.serialize_seq(Some(slots.len()))?;
                        for slot in slots {
                            match slot {
                                Slot::Merged { original: o, projection: j, new: k } => {
                                    seq.serialize_element(&Merged {
                                        original: original[o],
                                        projection: &p[j],
                                        new: &n[k],
                                    })?
                                }
                                Slot::New(k) => seq.serialize_element(&n[k])?,
                                Slot::Dropped(o) => seq.serialize_element(original[o])?,
                            }
                        }
                        seq.end()
                    }
                    None => self.new.serialize(serializer),
                },
                Err(_) => self.new.serialize(serializer),
            },
            _ => self.new.serialize(serializer),
        }
    }
}

fn merge_objects<S: Serializer>(
    serializer: S,
    members: &[(Cow<'_, str>, &RawValue)],
    p: &Map<String, Value>,
    n: &Map<String, Value>,
) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(None)?;
    for (key, original) in members {
        let key: &str = key;
        match (p.get(key), n.get(key)) {
            (Some(projection), Some(new)) => map.serialize_entry(key, &Merged { original, projection, new })?,
            (Some(_), None) => {}
            (None, Some(new)) => map.serialize_entry(key, new)?,
            (None, None) => map.serialize_entry(key, original)?,
        }
    }
    // Objects on the path to a change are small; a large one (a free-form map) is looked up
    // through a sorted index instead of scanned.
    let index: Option<Vec<&str>> = (members.len() > 16).then(|| {
        let mut keys: Vec<&str> = members.iter().map(|(k, _)| k.as_ref()).collect();
        keys.sort_unstable();
        keys
    });
    for (key, new) in n {
        let in_original = match &index {
            Some(keys) => keys.binary_search(&key.as_str()).is_ok(),
            None => members.iter().any(|(k, _)| k == key),
        };
        if !in_original && p.get(key) != Some(new) {
            map.serialize_entry(key, new)?;
        }
    }
    map.end()
}

/// Whether a tagged union changed variant: a tag member holding two different variant names.
fn variant_changed(p: &Map<String, Value>, n: &Map<String, Value>) -> bool {
    UNION_TAGS.iter().any(|(tag, variants)| match (p.get(*tag), n.get(*tag)) {
        (Some(Value::String(old)), Some(Value::String(new))) => {
            old != new && variants.contains(&old.as_str()) && variants.contains(&new.as_str())
        }
        _ => false,
    })
}

/// An object's members as written: keys (borrowed unless escaped) and raw values, in order.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some(Key(key)) = map.next_key()? {
                    members.push((key, map.next_value()?));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// A member name, borrowed from the input when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s)))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

/// One element of a merged array.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Slot {
    /// `merge(original[0], projection[1], new[2])`.
    Merged { original: usize, projection: usize, new: usize },
    /// An element only the new value has.
    New(usize),
    /// An original element `T` dropped when decoding, kept as written.
    Dropped(usize),
}

/// Above this many element comparisons, the pairing falls back to cheaper rules (a greedy
/// common subsequence, no search for moved elements).
const PAIRING_BUDGET: usize = 1 << 16;

/// The elements of a merged array (see rule 3 of the module documentation); `None` when the
/// original elements behind the projection cannot be told apart.
fn pair_elements(original: &[&RawValue], p: &[Value], n: &[Value]) -> Option<Vec<Slot>> {
    let behind = if original.len() == p.len() { (0..p.len()).collect() } else { align(original, p)? };
    let mut partner: Vec<Option<usize>> = vec![None; n.len()];
    let mut taken = vec![false; p.len()];
    // Pairs in the order of both arrays (the anchors between which changed elements pair up).
    let mut anchors: Vec<(usize, usize)> = Vec::new();
    let mut lead = 0;
    while lead < n.len() && lead < p.len() && n[lead] == p[lead] {
        anchors.push((lead, lead));
        lead += 1;
    }
    let mut trail = 0;
    while trail < n.len() - lead && trail < p.len() - lead && n[n.len() - 1 - trail] == p[p.len() - 1 - trail] {
        trail += 1;
    }
    let (n_mid, p_mid) = (lead..n.len() - trail, lead..p.len() - trail);
    anchors.extend(
        common_subsequence(&n[n_mid.clone()], &p[p_mid.clone()]).into_iter().map(|(k, j)| (k + lead, j + lead)),
    );
    anchors.extend((0..trail).rev().map(|t| (n.len() - 1 - t, p.len() - 1 - t)));
    for &(k, j) in &anchors {
        partner[k] = Some(j);
        taken[j] = true;
    }
    // Equal elements that moved.
    let loose_n: Vec<usize> = n_mid.clone().filter(|&k| partner[k].is_none()).collect();
    let loose_p: Vec<usize> = p_mid.clone().filter(|&j| !taken[j]).collect();
    if loose_n.len() * loose_p.len() <= PAIRING_BUDGET {
        for &k in &loose_n {
            if let Some(&j) = loose_p.iter().find(|&&j| !taken[j] && n[k] == p[j]) {
                partner[k] = Some(j);
                taken[j] = true;
            }
        }
    }
    // Between two anchors, the rest pair up one to one, in order.
    let mut previous = (0, 0);
    for &(k_end, j_end) in anchors.iter().chain(std::iter::once(&(n.len(), p.len()))) {
        let ks: Vec<usize> = (previous.0..k_end).filter(|&k| partner[k].is_none()).collect();
        let js: Vec<usize> = (previous.1..j_end).filter(|&j| !taken[j]).collect();
        for (&k, &j) in ks.iter().zip(&js) {
            partner[k] = Some(j);
            taken[j] = true;
        }
        previous = (k_end + 1, j_end + 1);
    }
    let mut slots: Vec<Slot> = (0..n.len())
        .map(|k| match partner[k] {
            Some(j) => Slot::Merged { original: behind[j], projection: j, new: k },
            None => Slot::New(k),
        })
        .collect();
    if original.len() > p.len() {
        slots = keep_dropped(slots, original.len(), &behind);
    }
    Some(slots)
}

/// The longest common subsequence of equal elements, as (index in `n`, index in `p`) pairs in
/// order; greedy past [`PAIRING_BUDGET`].
fn common_subsequence(n: &[Value], p: &[Value]) -> Vec<(usize, usize)> {
    if n.is_empty() || p.is_empty() {
        return Vec::new();
    }
    if n.len() * p.len() > PAIRING_BUDGET {
        let mut pairs = Vec::new();
        let mut from = 0;
        for (k, value) in n.iter().enumerate() {
            if let Some(j) = p[from..].iter().position(|candidate| candidate == value) {
                pairs.push((k, from + j));
                from += j + 1;
            }
        }
        return pairs;
    }
    // lengths[k][j]: the longest common subsequence of n[k..] and p[j..].
    let width = p.len() + 1;
    let mut lengths = vec![0u32; (n.len() + 1) * width];
    for k in (0..n.len()).rev() {
        for j in (0..p.len()).rev() {
            lengths[k * width + j] = if n[k] == p[j] {
                lengths[(k + 1) * width + j + 1] + 1
            } else {
                lengths[(k + 1) * width + j].max(lengths[k * width + j + 1])
            };
        }
    }
    let (mut k, mut j, mut pairs) = (0, 0, Vec::new());
    while k < n.len() && j < p.len() {
        if n[k] == p[j] {
            pairs.push((k, j));
            k += 1;
            j += 1;
        } else if lengths[(k + 1) * width + j] >= lengths[k * width + j + 1] {
            k += 1;
        } else {
            j += 1;
        }
    }
    pairs
}

/// The original element behind each projected one, when `T` dropped some while decoding: each
/// projected element in turn is the next original element it can be a reading of.
fn align(original: &[&RawValue], p: &[Value]) -> Option<Vec<usize>> {
    if original.len() < p.len() {
        return None;
    }
    let mut behind = Vec::with_capacity(p.len());
    for (i, raw) in original.iter().enumerate() {
        let Some(next) = p.get(behind.len()) else { break };
        let value: Value = serde_json::from_str(raw.get()).ok()?;
        if reads_as(&value, next) {
            behind.push(i);
        }
    }
    (behind.len() == p.len()).then_some(behind)
}

/// Whether `projection` can be what a type made of `original`: every member it has is in
/// `original` (or an empty default), recursively; arrays may have lost elements.
fn reads_as(original: &Value, projection: &Value) -> bool {
    match (original, projection) {
        (Value::Object(o), Value::Object(p)) => p.iter().all(|(k, pv)| match o.get(k) {
            Some(ov) => reads_as(ov, pv),
            None => is_empty_default(pv),
        }),
        (Value::Array(o), Value::Array(p)) => {
            let mut rest = o.iter();
            p.iter().all(|pv| rest.any(|ov| reads_as(ov, pv)))
        }
        (Value::Number(o), Value::Number(p)) => o == p || o.as_f64() == p.as_f64(),
        (Value::Null, Value::Object(p)) => p.is_empty(),
        _ => original == projection,
    }
}

fn is_empty_default(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
    }
}

/// `slots` with the original elements that have no projection (dropped while decoding) put
/// back, each after the slot of the original element that preceded it (or first).
fn keep_dropped(slots: Vec<Slot>, original_len: usize, behind: &[usize]) -> Vec<Slot> {
    let mut is_behind = vec![false; original_len];
    for &i in behind {
        is_behind[i] = true;
    }
    let origin = |slot: &Slot| match *slot {
        Slot::Merged { original, .. } => Some(original),
        _ => None,
    };
    let mut front = Vec::new();
    let mut after: Vec<Vec<Slot>> = vec![Vec::new(); slots.len()];
    for dropped in (0..original_len).filter(|&i| !is_behind[i]) {
        let host = slots
            .iter()
            .enumerate()
            .filter_map(|(at, slot)| origin(slot).filter(|&o| o < dropped).map(|o| (o, at)))
            .max()
            .map(|(_, at)| at);
        match host {
            Some(at) => after[at].push(Slot::Dropped(dropped)),
            None => front.push(Slot::Dropped(dropped)),
        }
    }
    front
        .into_iter()
        .chain(slots.into_iter().zip(after).flat_map(|(slot, rest)| std::iter::once(slot).chain(rest)))
        .collect()
}
