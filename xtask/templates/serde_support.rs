//! Serde helpers shared by the generated types: lenient decoding (`x-deserialize-default-on-error`,
//! `x-deserialize-skip-invalid-items`) and the hand-written half of the tagged unions.
//!
//! [`Nullable`], [`UnknownVariant`], [`OrderedMap`] and [`null_as_empty`] are for users too;
//! the other items are used by the generated code only, and hidden from the documentation.

use serde::de::DeserializeOwned;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// One call to read or write a field that may be absent, `null` or a value.
///
/// A member that the schema makes both optional and nullable is an `Option<Option<T>>` in the
/// generated types, so that the two ways of not giving a value stay apart when a message is
/// decoded and written back:
///
/// | on the wire      | in Rust          | [`value`](Nullable::value) | [`is_absent`](Nullable::is_absent) | [`is_null`](Nullable::is_null) |
/// |------------------|------------------|---------|---------|---------|
/// | member left out  | `None`           | `None`  | `true`  | `false` |
/// | `null`           | `Some(None)`     | `None`  | `false` | `true`  |
/// | a value          | `Some(Some(v))`  | `Some(&v)` | `false` | `false` |
///
/// For most fields both mean "no value" and [`value`](Nullable::value) is all a reader needs;
/// where the field's description gives `null` a meaning of its own (in protocol v2 updates it
/// clears what an earlier update set), [`is_null`](Nullable::is_null) and
/// [`apply_to`](Nullable::apply_to) tell it apart. The trait is implemented for every
/// `Option<Option<T>>`; bring it into scope with `use acp_types::Nullable;` (a vendored file
/// has it at its root too).
pub trait Nullable: Sized {
    /// The value's type: `T` for `Option<Option<T>>`.
    type Value;

    /// The value, if there is one (`None` for both absent and `null`).
    fn value(&self) -> Option<&Self::Value>;

    /// The value, mutably, if there is one.
    fn value_mut(&mut self) -> Option<&mut Self::Value>;

    /// The value, if there is one, taken out.
    fn into_value(self) -> Option<Self::Value>;

    /// Whether the member was `null` (present, without a value).
    fn is_null(&self) -> bool;

    /// Whether the member was left out.
    fn is_absent(&self) -> bool;

    /// Whether there is a value (neither absent nor `null`).
    fn has_value(&self) -> bool {
        self.value().is_some()
    }

    /// A member left out: `None`. Reads well where the field's type is known
    /// (`update.title = Nullable::absent();`).
    fn absent() -> Self;

    /// A member written as `null`: `Some(None)`.
    fn null() -> Self;

    /// A member holding `value`: `Some(Some(value))`.
    fn of(value: Self::Value) -> Self;

    /// Applies this member as an update of `target`, as protocol v2's updates are meant: absent
    /// leaves `target` as it is, `null` clears it, a value replaces it.
    fn apply_to(&self, target: &mut Option<Self::Value>)
    where
        Self::Value: Clone;
}

impl<T> Nullable for Option<Option<T>> {
    type Value = T;

    fn value(&self) -> Option<&T> {
        self.as_ref().and_then(Option::as_ref)
    }

    fn value_mut(&mut self) -> Option<&mut T> {
        self.as_mut().and_then(Option::as_mut)
    }

    fn into_value(self) -> Option<T> {
        self.flatten()
    }

    fn is_null(&self) -> bool {
        matches!(self, Some(None))
    }

    fn is_absent(&self) -> bool {
        self.is_none()
    }

    fn absent() -> Self {
        None
    }

    fn null() -> Self {
        Some(None)
    }

    fn of(value: T) -> Self {
        Some(Some(value))
    }

    fn apply_to(&self, target: &mut Option<T>)
    where
        T: Clone,
    {
        if let Some(update) = self {
            target.clone_from(update);
        }
    }
}

/// A union variant this version of the schema does not know: the whole object as received,
/// tag included, written back unchanged (the same JSON; its keys in the order they came with
/// serde_json's `preserve_order` feature, in sorted order without it).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UnknownVariant(pub Map<String, Value>);

impl UnknownVariant {
    /// The value of the tag property `tag`, if it is a string.
    pub fn tag(&self, tag: &str) -> Option<&str> {
        self.0.get(tag).and_then(Value::as_str)
    }
}

/// A JSON object whose members all have one type (`additionalProperties` in the schema),
/// kept in the order they came and written back in it: the order can matter to the peer (the
/// fields of an elicitation form are shown in it).
///
/// Backed by a `Vec`, so lookups are linear, which suits the small objects of the protocol.
/// A key written twice on the wire keeps its first place and its last value, as
/// `serde_json::Map` does. Two maps are equal when they hold the same entries, in any order.
#[derive(Debug, Clone)]
pub struct OrderedMap<V>(Vec<(String, V)>);

impl<V> Default for OrderedMap<V> {
    fn default() -> Self {
        OrderedMap(Vec::new())
    }
}

impl<V> OrderedMap<V> {
    /// An empty map.
    pub fn new() -> Self {
        OrderedMap(Vec::new())
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the map has no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&V> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The value of `key`, mutably, if present.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.0.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key` to `value`: in its place when the key is there (returning the old value),
    /// else at the end.
    pub fn insert(&mut self, key: impl Into<String>, value: V) -> Option<V> {
        let key = key.into();
        match self.get_mut(&key) {
            Some(slot) => Some(std::mem::replace(slot, value)),
            None => {
                self.0.push((key, value));
                None
            }
        }
    }

    /// Removes `key`, keeping the others in order.
    pub fn remove(&mut self, key: &str) -> Option<V> {
        let at = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(at).1)
    }

    /// The entries, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }

    /// The values, in the order of their keys.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }

    /// The entries, in order, with mutable values.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut V)> {
        self.0.iter_mut().map(|(k, v)| (k.as_str(), v))
    }

    /// The values, mutably, in the order of their keys.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.0.iter_mut().map(|(_, v)| v)
    }

    /// The entries, in order.
    pub fn as_slice(&self) -> &[(String, V)] {
        &self.0
    }

    /// The entries, in order.
    pub fn into_vec(self) -> Vec<(String, V)> {
        self.0
    }

    /// Entries as read from the wire: a repeated key keeps its first place and its last value.
    fn from_wire(entries: Vec<(String, V)>) -> Self {
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_by(|&a, &b| entries[a].0.cmp(&entries[b].0).then(a.cmp(&b)));
        if order.windows(2).all(|w| entries[w[0]].0 != entries[w[1]].0) {
            return OrderedMap(entries);
        }
        // For the first occurrence of each key, the index of its last one.
        let mut last_of = vec![None; entries.len()];
        for run in order.chunk_by(|&a, &b| entries[a].0 == entries[b].0) {
            last_of[run[0]] = run.last().copied();
        }
        let mut slots: Vec<Option<(String, V)>> = entries.into_iter().map(Some).collect();
        let mut out = Vec::new();
        for first in 0..slots.len() {
            let (Some(last), Some((key, value))) = (last_of[first], slots[first].take()) else { continue };
            let value = match slots.get_mut(last).and_then(Option::take) {
                Some((_, later)) if last != first => later,
                _ => value,
            };
            out.push((key, value));
        }
        OrderedMap(out)
    }
}

/// Same entries, in any order (the JSON of two equal maps may list them differently).
impl<V: PartialEq> PartialEq for OrderedMap<V> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

impl<V: Eq> Eq for OrderedMap<V> {}

impl<V: std::hash::Hash> std::hash::Hash for OrderedMap<V> {
    /// In key order, as equality ignores the order.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let mut entries: Vec<&(String, V)> = self.0.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries.hash(state);
    }
}

impl<K: Into<String>, V> FromIterator<(K, V)> for OrderedMap<V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = OrderedMap::new();
        map.extend(iter);
        map
    }
}

impl<K: Into<String>, V> Extend<(K, V)> for OrderedMap<V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k, v);
        }
    }
}

impl<K: Into<String>, V, const N: usize> From<[(K, V); N]> for OrderedMap<V> {
    fn from(entries: [(K, V); N]) -> Self {
        entries.into_iter().collect()
    }
}

impl<V> From<Vec<(String, V)>> for OrderedMap<V> {
    fn from(entries: Vec<(String, V)>) -> Self {
        OrderedMap::from_wire(entries)
    }
}

impl<V> From<std::collections::BTreeMap<String, V>> for OrderedMap<V> {
    fn from(map: std::collections::BTreeMap<String, V>) -> Self {
        OrderedMap(map.into_iter().collect())
    }
}

impl<'a, V> IntoIterator for &'a OrderedMap<V> {
    type Item = (&'a str, &'a V);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (String, V)>, fn(&'a (String, V)) -> (&'a str, &'a V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
}

/// `map["key"]`; panics when the key is absent, as `HashMap` does ([`OrderedMap::get`] does not).
impl<V> std::ops::Index<&str> for OrderedMap<V> {
    type Output = V;
    fn index(&self, key: &str) -> &V {
        self.get(key).unwrap_or_else(|| panic!("no entry `{key}` in the map"))
    }
}

impl<V> IntoIterator for OrderedMap<V> {
    type Item = (String, V);
    type IntoIter = std::vec::IntoIter<(String, V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<V: Serialize> Serialize for OrderedMap<V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for OrderedMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> serde::de::Visitor<'de> for Visitor<V> {
            type Value = OrderedMap<V>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<OrderedMap<V>, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
                while let Some(entry) = map.next_entry::<String, V>()? {
                    entries.push(entry);
                }
                Ok(OrderedMap::from_wire(entries))
            }
        }
        d.deserialize_map(Visitor(std::marker::PhantomData))
    }
}

/// The schema of a map with string keys, as schemars gives it for `BTreeMap<String, V>`.
#[cfg(feature = "schemars")]
impl<V: schemars::JsonSchema> schemars::JsonSchema for OrderedMap<V> {
    fn inline_schema() -> bool {
        <std::collections::BTreeMap<String, V> as schemars::JsonSchema>::inline_schema()
    }
    fn schema_name() -> std::borrow::Cow<'static, str> {
        <std::collections::BTreeMap<String, V> as schemars::JsonSchema>::schema_name()
    }
    fn schema_id() -> std::borrow::Cow<'static, str> {
        <std::collections::BTreeMap<String, V> as schemars::JsonSchema>::schema_id()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <std::collections::BTreeMap<String, V> as schemars::JsonSchema>::json_schema(generator)
    }
}

/// A `number` written the way JavaScript peers (most ACP peers) write small integers: a finite
/// integral value within ±2^53 without a fraction (`1`, not `1.0`), as `JSON.stringify` does;
/// any other value as serde_json writes an `f64` (so `2^54` is `1.8014398509481984e16`, where
/// JavaScript would write the digits). The Rust type stays `f64`; decoding accepts both forms.
#[doc(hidden)]
pub trait JsonNumber {
    fn serialize_number<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error>;
}

/// 2^53: beyond it not every integer is an `f64`, and JavaScript's safe integers end.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_992.0;

impl JsonNumber for f64 {
    fn serialize_number<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.is_finite() && self.fract() == 0.0 && self.abs() <= MAX_SAFE_INTEGER {
            serializer.serialize_i64(*self as i64)
        } else {
            serializer.serialize_f64(*self)
        }
    }
}

impl<T: JsonNumber> JsonNumber for Option<T> {
    fn serialize_number<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Some(value) => serializer.serialize_some(&Number(value)),
            None => serializer.serialize_none(),
        }
    }
}

impl<T: JsonNumber> JsonNumber for Vec<T> {
    fn serialize_number<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter().map(Number))
    }
}

impl<T: JsonNumber> JsonNumber for OrderedMap<T> {
    fn serialize_number<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter().map(|(k, v)| (k, Number(v))))
    }
}

/// A value holding numbers, serialised through [`JsonNumber`].
#[doc(hidden)]
pub struct Number<'a, T: ?Sized>(pub &'a T);

impl<T: JsonNumber + ?Sized> Serialize for Number<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize_number(serializer)
    }
}

/// `serialize_with` for fields and variants holding numbers (see [`JsonNumber`]).
#[doc(hidden)]
pub fn number<T: JsonNumber + ?Sized, S: Serializer>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
    value.serialize_number(serializer)
}

/// A malformed value decodes as the type's default instead of failing the whole message.
///
/// The lenient helpers decode the buffered value by reference, as union payloads and the
/// values nested in them are read: each type is then compiled for one in-memory source
/// besides text (by value it would be a third one, about 23 KB more in an agent).
#[doc(hidden)]
pub fn default_on_error<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(d: D) -> Result<T, D::Error> {
    let value = Value::deserialize(d)?;
    Ok(T::deserialize(&value).unwrap_or_default())
}

fn items<T: DeserializeOwned>(items: Vec<Value>) -> Vec<T> {
    items.iter().filter_map(|item| T::deserialize(item).ok()).collect()
}

/// `null` decodes as the default (`x-deserialize-default-on-null` on a required member: a
/// peer that writes `null` for an empty list is understood); any other value must fit.
#[doc(hidden)]
pub fn default_on_null<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(d: D) -> Result<T, D::Error> {
    Option::<T>::deserialize(d).map(Option::unwrap_or_default)
}

/// An array whose malformed items are dropped; anything but an array is an error.
#[doc(hidden)]
pub fn vec_skip_invalid<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(items(Vec::<Value>::deserialize(d)?))
}

/// An array whose malformed items are dropped; anything but an array decodes as empty.
#[doc(hidden)]
pub fn vec_skip_invalid_or_default<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(values) => items(values),
        _ => Vec::new(),
    })
}

/// An optional array whose malformed items are dropped; `null` is `None`.
#[doc(hidden)]
pub fn opt_vec_skip_invalid<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<Vec<T>>, D::Error> {
    Ok(Option::<Vec<Value>>::deserialize(d)?.map(items))
}

/// An optional array whose malformed items are dropped; anything but an array is `None`.
#[doc(hidden)]
pub fn opt_vec_skip_invalid_or_default<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<Vec<T>>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(values) => Some(items(values)),
        _ => None,
    })
}

/// An optional field whose type holds `null` itself (any JSON value) that is present: `null`
/// is `Some(Value::Null)`, so it stays apart from absent (`None`).
#[doc(hidden)]
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// An optional, nullable field that is present: `null` is `Some(None)`, a value `Some(Some(v))`.
#[doc(hidden)]
pub fn tri<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// As [`tri`], with a malformed value read as absent.
#[doc(hidden)]
pub fn tri_or_default<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Null => Some(None),
        value => T::deserialize(&value).ok().map(Some),
    })
}

/// As [`tri`] for an array whose malformed items are dropped.
#[doc(hidden)]
pub fn tri_vec_skip_invalid<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<Option<Vec<T>>>, D::Error> {
    Ok(Some(Option::<Vec<Value>>::deserialize(d)?.map(items)))
}

/// As [`tri_vec_skip_invalid`], with anything but an array or `null` read as absent.
#[doc(hidden)]
pub fn tri_vec_skip_invalid_or_default<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Option<Option<Vec<T>>>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Null => Some(None),
        Value::Array(values) => Some(Some(items(values))),
        _ => None,
    })
}

/// An object that may come as `null`: a result that peers write as `null` when it has nothing
/// to say (`fs/write_text_file`, `session/load`), or params that a message leaves out (JSON-RPC
/// allows it; the caller decodes them from `null`). Read as the empty object, which the types
/// whose members are all optional accept; the others report their first missing field.
pub fn null_as_empty<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    match Option::<T>::deserialize(d)? {
        Some(value) => Ok(value),
        None => T::deserialize(serde::de::value::MapDeserializer::<_, D::Error>::new(std::iter::empty::<(&str, ())>())),
    }
}

/// Reads a union value, which must be a JSON object, and decodes it with `decode` before the
/// deserializer leaves the object: serde_json then places a failure at the union's own object,
/// so the JSON path of the error ends there (`prompt[1]`), not at the array holding it.
#[doc(hidden)]
pub fn union<'de, D: Deserializer<'de>, T>(
    d: D,
    decode: impl FnOnce(Map<String, Value>) -> Result<T, serde_json::Error>,
) -> Result<T, D::Error> {
    struct Visitor<F>(F);
    impl<'de, T, F: FnOnce(Map<String, Value>) -> Result<T, serde_json::Error>> serde::de::Visitor<'de> for Visitor<F> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
            let mut object = Map::new();
            while let Some((key, value)) = map.next_entry::<String, Value>()? {
                object.insert(key, value);
            }
            (self.0)(object).map_err(serde::de::Error::custom)
        }
    }
    d.deserialize_map(Visitor(decode))
}

/// The tag of a union value: `None` when the property is absent, an error when it is not a string.
#[doc(hidden)]
pub fn tag_of<'a, E: serde::de::Error>(value: &'a Map<String, Value>, tag: &'static str) -> Result<Option<&'a str>, E> {
    match value.get(tag) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(E::custom(format_args!("`{tag}` must be a string"))),
    }
}

/// Decodes a variant's payload type from the union object without the tag property: the
/// union writes the tag itself, and a payload that keeps unknown members (a flattened open
/// union) would otherwise keep the tag too and write it twice.
#[doc(hidden)]
pub fn payload<T: DeserializeOwned, E: serde::de::Error>(value: &Map<String, Value>, tag: &'static str) -> Result<T, E> {
    T::deserialize(MapRef(value, tag)).map_err(E::custom)
}

/// Decodes a variant that carries a single property.
#[doc(hidden)]
pub fn property<T: DeserializeOwned, E: serde::de::Error>(value: &Map<String, Value>, name: &'static str) -> Result<T, E> {
    match value.get(name) {
        Some(v) => T::deserialize(v).map_err(E::custom),
        None => Err(E::missing_field(name)),
    }
}

/// A borrowed map less one property as a deserializer, so a payload decodes without copying
/// the object.
struct MapRef<'a>(&'a Map<String, Value>, &'static str);

impl<'de> Deserializer<'de> for MapRef<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_map(serde::de::value::MapDeserializer::new(MapRefEntries { entries: self.0.iter(), skip: self.1 }))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

/// The entries of a [`MapRef`]. A named type rather than `filter`/`map` closures: a closure
/// written inside `deserialize_any` would be a new type for each visitor, and so would the
/// `MapDeserializer` over it, compiling every payload's field readers once per payload type.
struct MapRefEntries<'a> {
    entries: serde_json::map::Iter<'a>,
    skip: &'static str,
}

impl<'a> Iterator for MapRefEntries<'a> {
    type Item = (&'a str, &'a Value);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (key, value) = self.entries.next()?;
            if key != self.skip {
                return Some((key.as_str(), value));
            }
        }
    }
}

/// Writes `{tag: name}`.
#[doc(hidden)]
pub fn serialize_tag<S: Serializer>(serializer: S, tag: &'static str, name: &'static str) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(1))?;
    map.serialize_entry(tag, name)?;
    map.end()
}

/// Writes `{tag: name, property: value}`.
#[doc(hidden)]
pub fn serialize_tag_and_property<S: Serializer, T: Serialize>(
    serializer: S,
    tag: &'static str,
    name: &'static str,
    property: &'static str,
    value: &T,
) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(2))?;
    map.serialize_entry(tag, name)?;
    map.serialize_entry(property, value)?;
    map.end()
}

/// Writes `{property: value}`.
#[doc(hidden)]
pub fn serialize_property<S: Serializer, T: Serialize>(serializer: S, property: &'static str, value: &T) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(1))?;
    map.serialize_entry(property, value)?;
    map.end()
}

/// Writes the payload's properties after `{tag: name}`.
#[doc(hidden)]
pub fn serialize_tagged<S: Serializer, T: Serialize>(serializer: S, tag: &'static str, name: &'static str, payload: &T) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Tagged<'a, T> {
        #[serde(skip)]
        _p: std::marker::PhantomData<&'a ()>,
        #[serde(flatten)]
        tag: TagEntry,
        #[serde(flatten)]
        payload: &'a T,
    }
    struct TagEntry(&'static str, &'static str);
    impl Serialize for TagEntry {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut map = serializer.serialize_map(Some(1))?;
            map.serialize_entry(self.0, self.1)?;
            map.end()
        }
    }
    Tagged { _p: std::marker::PhantomData, tag: TagEntry(tag, name), payload }.serialize(serializer)
}

/// A map key, borrowed from the input when it can be (no allocation per field name).
#[doc(hidden)]
pub enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    pub fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a property name")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// A way of decoding one field's value into `T` (a marker per helper function above), named
/// by the generated `Deserialize` impls in their field tables.
#[doc(hidden)]
pub trait Lenient<T> {
    fn decode<'de, D: Deserializer<'de>>(d: D) -> Result<T, D::Error>;
}

struct Via<H, T>(T, std::marker::PhantomData<H>);

impl<'de, H: Lenient<T>, T> Deserialize<'de> for Via<H, T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        H::decode(d).map(|value| Via(value, std::marker::PhantomData))
    }
}

macro_rules! lenient_markers {
    ($($(#[$doc:meta])* $marker:ident: $helper:ident => $out:ty, where [$($bound:tt)*];)*) => {$(
        $(#[$doc])*
        #[doc(hidden)]
        pub enum $marker {}
        impl<T: $($bound)*> Lenient<$out> for $marker {
            fn decode<'de, D: Deserializer<'de>>(d: D) -> Result<$out, D::Error> {
                $helper(d)
            }
        }
    )*};
}

lenient_markers! {
    /// [`tri`]
    Tri: tri => Option<Option<T>>, where [DeserializeOwned];
    /// [`present`]
    Present: present => Option<T>, where [DeserializeOwned];
    /// [`default_on_error`]
    DefaultOnError: default_on_error => T, where [DeserializeOwned + Default];
    /// [`default_on_null`]
    DefaultOnNull: default_on_null => T, where [DeserializeOwned + Default];
    /// [`vec_skip_invalid`]
    VecSkipInvalid: vec_skip_invalid => Vec<T>, where [DeserializeOwned];
    /// [`vec_skip_invalid_or_default`]
    VecSkipInvalidOrDefault: vec_skip_invalid_or_default => Vec<T>, where [DeserializeOwned];
    /// [`opt_vec_skip_invalid`]
    OptVecSkipInvalid: opt_vec_skip_invalid => Option<Vec<T>>, where [DeserializeOwned];
    /// [`opt_vec_skip_invalid_or_default`]
    OptVecSkipInvalidOrDefault: opt_vec_skip_invalid_or_default => Option<Vec<T>>, where [DeserializeOwned];
    /// [`tri_or_default`]
    TriOrDefault: tri_or_default => Option<Option<T>>, where [DeserializeOwned];
    /// [`tri_vec_skip_invalid`]
    TriVecSkipInvalid: tri_vec_skip_invalid => Option<Option<Vec<T>>>, where [DeserializeOwned];
    /// [`tri_vec_skip_invalid_or_default`]
    TriVecSkipInvalidOrDefault: tri_vec_skip_invalid_or_default => Option<Option<Vec<T>>>, where [DeserializeOwned];
}

// acp-types' struct decoder, from here to the closing line below. A vendored file gets the
// safe decoder of xtask/templates/vendored_struct_decoder.rs in its place: vendored code lands
// in crates whose lints it cannot know (`#![forbid(unsafe_code)]`), and is not run under Miri.
// <acp-types only>
/// One field of a struct that [`decode_fields`] fills: its name on the wire, where it lives in
/// the struct, and the functions for its type.
///
/// A constant table of these replaces a decoding loop per struct: the loop is compiled once per
/// `MapAccess` type and a field's functions once per field type, so a struct adds a table (per
/// field 32 bytes and two load-time relocations) rather than kilobytes of code. The functions are type-erased (`*mut ()` for the
/// `MapAccess`), which keeps the table a `'static` constant whatever the lifetimes of the
/// deserializer. [`decode_fields`] is only sound with a table built for its own `A`, which the
/// `deserialize_struct!` expansion guarantees.
#[doc(hidden)]
pub struct FieldSlot {
    wire: &'static str,
    offset: usize,
    ops: &'static FieldOps,
}

/// What [`decode_fields`] does with one field type, for one `MapAccess` type.
#[doc(hidden)]
pub struct FieldOps {
    /// Reads the next map value (`map: *mut A`) into the slot. On failure it writes the error
    /// to `error` (an `*mut Option<A::Error>`) and returns `false`.
    read: unsafe fn(map: *mut (), slot: *mut u8, error: *mut ()) -> bool,
    drop: unsafe fn(slot: *mut u8),
    /// Writes the value of a member left out, or `None` when the member is required.
    absent: Option<unsafe fn(slot: *mut u8)>,
}

/// The [`FieldOps`] of `T` read with `T`'s own `Deserialize` (`H = ()`) or with the
/// [`Lenient`] helper `H`, from an `A`.
struct OpsOf<A, H, T>(std::marker::PhantomData<(A, H, T)>);

impl<'de, A: serde::de::MapAccess<'de>, T: Deserialize<'de>> OpsOf<A, (), T> {
    const REQUIRED: FieldOps = FieldOps { read: read_slot::<A, T>, drop: drop_slot::<T>, absent: None };
}

impl<'de, A: serde::de::MapAccess<'de>, T: Deserialize<'de> + Default> OpsOf<A, (), T> {
    const OPTIONAL: FieldOps = FieldOps { read: read_slot::<A, T>, drop: drop_slot::<T>, absent: Some(default_slot::<T>) };
}

impl<'de, A: serde::de::MapAccess<'de>, H: Lenient<T>, T> OpsOf<A, H, T> {
    const REQUIRED_VIA: FieldOps = FieldOps { read: read_slot_via::<A, H, T>, drop: drop_slot::<T>, absent: None };
}

impl<'de, A: serde::de::MapAccess<'de>, H: Lenient<T>, T: Default> OpsOf<A, H, T> {
    const OPTIONAL_VIA: FieldOps =
        FieldOps { read: read_slot_via::<A, H, T>, drop: drop_slot::<T>, absent: Some(default_slot::<T>) };
}

impl FieldSlot {
    /// A required field of type `T`, read with `T`'s own `Deserialize`. `_field` names the
    /// field (`|v: &S| &v.field`) so that `T` is inferred; it is never called.
    pub const fn required<'de, A: serde::de::MapAccess<'de>, S, T: Deserialize<'de>>(
        wire: &'static str,
        offset: usize,
        _field: fn(&S) -> &T,
    ) -> Self {
        FieldSlot { wire, offset, ops: &OpsOf::<A, (), T>::REQUIRED }
    }

    /// An optional field (an `Option`, `None` when left out).
    pub const fn optional<'de, A: serde::de::MapAccess<'de>, S, T: Deserialize<'de> + Default>(
        wire: &'static str,
        offset: usize,
        _field: fn(&S) -> &T,
    ) -> Self {
        FieldSlot { wire, offset, ops: &OpsOf::<A, (), T>::OPTIONAL }
    }

    /// A required field read with the [`Lenient`] helper `H`.
    pub const fn required_via<'de, A: serde::de::MapAccess<'de>, H: Lenient<T>, S, T>(
        wire: &'static str,
        offset: usize,
        _field: fn(&S) -> &T,
    ) -> Self {
        FieldSlot { wire, offset, ops: &OpsOf::<A, H, T>::REQUIRED_VIA }
    }

    /// An optional field read with the [`Lenient`] helper `H`.
    pub const fn optional_via<'de, A: serde::de::MapAccess<'de>, H: Lenient<T>, S, T: Default>(
        wire: &'static str,
        offset: usize,
        _field: fn(&S) -> &T,
    ) -> Self {
        FieldSlot { wire, offset, ops: &OpsOf::<A, H, T>::OPTIONAL_VIA }
    }
}

/// # Safety
/// `map` points to an `A`, `slot` to writable, aligned, uninitialized memory for a `T`,
/// `error` to an `Option<A::Error>`.
unsafe fn read_slot<'de, A: serde::de::MapAccess<'de>, T: Deserialize<'de>>(map: *mut (), slot: *mut u8, error: *mut ()) -> bool {
    // SAFETY: as the caller promises.
    unsafe { settle((*map.cast::<A>()).next_value::<T>(), slot, error) }
}

/// # Safety
/// As [`read_slot`].
unsafe fn read_slot_via<'de, A: serde::de::MapAccess<'de>, H: Lenient<T>, T>(map: *mut (), slot: *mut u8, error: *mut ()) -> bool {
    // SAFETY: as the caller promises.
    unsafe { settle((*map.cast::<A>()).next_value::<Via<H, T>>().map(|via| via.0), slot, error) }
}

/// Writes a read value to its slot, or the error to `error`; returns whether it was a value.
///
/// # Safety
/// `slot` as in [`read_slot`]; `error` points to an `Option<E>`.
unsafe fn settle<T, E>(value: Result<T, E>, slot: *mut u8, error: *mut ()) -> bool {
    match value {
        Ok(value) => {
            // SAFETY: `slot` is valid for a `T` (caller).
            unsafe { slot.cast::<T>().write(value) };
            true
        }
        Err(e) => {
            // SAFETY: `error` is valid (caller).
            unsafe { *error.cast::<Option<E>>() = Some(e) };
            false
        }
    }
}

/// # Safety
/// `slot` holds an initialized `T`, which is dropped.
unsafe fn drop_slot<T>(slot: *mut u8) {
    // SAFETY: as the caller promises.
    unsafe { slot.cast::<T>().drop_in_place() }
}

/// # Safety
/// `slot` is writable, aligned, uninitialized memory for a `T`.
unsafe fn default_slot<T: Default>(slot: *mut u8) {
    // SAFETY: as the caller promises.
    unsafe { slot.cast::<T>().write(T::default()) }
}

/// The fields of the struct at `out` written so far (bit `i` for `fields[i]`), dropped unless
/// the decode succeeds. Not generic, so the bookkeeping is compiled once for every struct and
/// deserializer.
struct Written {
    fields: &'static [FieldSlot],
    out: *mut u8,
    set: u64,
}

impl Written {
    /// The slot of the member named `key`, emptied if an earlier occurrence filled it, with
    /// its index; `None` for a member the struct does not have.
    fn slot(&mut self, key: &str) -> Option<(usize, *mut u8)> {
        let i = self.fields.iter().position(|field| field.wire == key)?;
        let field = &self.fields[i];
        // SAFETY: `offset` is the field's offset within the struct at `out` ([`decode_fields`]).
        let slot = unsafe { self.out.add(field.offset) };
        if self.set & (1 << i) != 0 {
            self.set &= !(1 << i);
            // SAFETY: the bit was set, so the slot holds the earlier occurrence's value.
            unsafe { (field.ops.drop)(slot) }
        }
        Some((i, slot))
    }

    /// Fills each field left out with its absent value; the first required one left out is
    /// returned by its wire name instead.
    fn fill_absent(&mut self) -> Result<(), &'static str> {
        for (i, field) in self.fields.iter().enumerate() {
            if self.set & (1 << i) == 0 {
                let write_absent = field.ops.absent.ok_or(field.wire)?;
                // SAFETY: as in `slot`; the slot is uninitialized.
                unsafe { write_absent(self.out.add(field.offset)) };
                self.set |= 1 << i;
            }
        }
        Ok(())
    }
}

impl Drop for Written {
    fn drop(&mut self) {
        for (i, field) in self.fields.iter().enumerate() {
            if self.set & (1 << i) != 0 {
                // SAFETY: the bit is set only while the slot holds a value.
                unsafe { (field.ops.drop)(self.out.add(field.offset)) }
            }
        }
    }
}

/// Fills the struct at `out` from `map` as `fields` describe it: one pass over the map, each
/// known member read into its field (a repeated member replaces the earlier value), unknown
/// members skipped, then absent optional fields defaulted and an absent required one reported
/// as missing. On an error or a panic, the fields written so far are dropped.
///
/// # Safety
/// `fields` lists every field of the struct at `out` exactly once (at most 64), with its offset
/// and the ops of its type built for this `A`; `out` is writable, aligned, uninitialized
/// memory for that struct. When this returns `Ok`, every field is initialized.
#[doc(hidden)]
pub unsafe fn decode_fields<'de, A: serde::de::MapAccess<'de>>(mut map: A, fields: &'static [FieldSlot], out: *mut u8) -> Result<(), A::Error> {
    debug_assert!(fields.len() <= 64, "a struct decoded by a field table has at most 64 fields");
    let mut written = Written { fields, out, set: 0 };
    let mut error: Option<A::Error> = None;
    while let Some(key) = map.next_key::<Key<'de>>()? {
        let Some((i, slot)) = written.slot(key.as_str()) else {
            map.next_value::<serde::de::IgnoredAny>()?;
            continue;
        };
        // SAFETY: the ops were built for this `A` and the field's type (caller); `slot` is
        // the field's, uninitialized.
        if !unsafe { (fields[i].ops.read)((&raw mut map).cast(), slot, (&raw mut error).cast()) } {
            return Err(error.take().unwrap_or_else(|| serde::de::Error::custom("a field was left unread")));
        }
        written.set |= 1 << i;
    }
    written.fill_absent().map_err(serde::de::Error::missing_field)?;
    std::mem::forget(written);
    Ok(())
}

/// Implements a streaming `Deserialize` for a plain struct: one pass over the map, unknown
/// keys skipped. Each field is `name: "wire" => required | optional`, optionally with a
/// [`Lenient`] marker (`required(Marker)`). The expansion is a constant table of
/// [`FieldSlot`]s and a call to [`decode_fields`], so each struct costs a few hundred bytes
/// of data instead of a decoding loop of its own; compared with serde's derive there is no
/// field-identifier type, no sequence form and no wrapper type per lenient field, which also
/// keeps the generated crate quick to compile.
macro_rules! deserialize_struct {
    ($name:ident { $($(#[$cfg:meta])* $field:ident: $wire:literal => $how:ident $(($marker:ident))?),* $(,)? }) => {
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Visitor;
                impl<'de> serde::de::Visitor<'de> for Visitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str(concat!("a ", stringify!($name), " object"))
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<$name, A::Error> {
                        // The table must name every field: a pattern without `..` does not
                        // compile otherwise.
                        #[allow(unused)]
                        fn every_field_listed(value: &$name) {
                            let $name { $($(#[$cfg])* $field: _),* } = value;
                        }
                        let fields: &'static [serde_support::FieldSlot] = const {
                            &[$($(#[$cfg])* serde_support::deserialize_struct!(@slot A $name $field $wire $how $($marker)?)),*]
                        };
                        let mut value = std::mem::MaybeUninit::<$name>::uninit();
                        // SAFETY: `fields` lists every field of `$name` (checked above) with its
                        // offset and type, for this `A`; on `Ok` all of them are initialized.
                        unsafe {
                            serde_support::decode_fields(map, fields, value.as_mut_ptr().cast())?;
                            Ok(value.assume_init())
                        }
                    }
                }
                deserializer.deserialize_map(Visitor)
            }
        }
    };
    (@slot $a:ident $name:ident $field:ident $wire:literal required) => {
        serde_support::FieldSlot::required::<$a, _, _>($wire, std::mem::offset_of!($name, $field), |v: &$name| &v.$field)
    };
    (@slot $a:ident $name:ident $field:ident $wire:literal optional) => {
        serde_support::FieldSlot::optional::<$a, _, _>($wire, std::mem::offset_of!($name, $field), |v: &$name| &v.$field)
    };
    (@slot $a:ident $name:ident $field:ident $wire:literal required $marker:ident) => {
        serde_support::FieldSlot::required_via::<$a, serde_support::$marker, _, _>($wire, std::mem::offset_of!($name, $field), |v: &$name| &v.$field)
    };
    (@slot $a:ident $name:ident $field:ident $wire:literal optional $marker:ident) => {
        serde_support::FieldSlot::optional_via::<$a, serde_support::$marker, _, _>($wire, std::mem::offset_of!($name, $field), |v: &$name| &v.$field)
    };
}
pub(crate) use deserialize_struct;

/// The field-table decoder on its own, including its error paths (run under Miri in CI: the
/// decoder writes fields through raw pointers).
#[cfg(test)]
mod tests {
    use super as serde_support;
    use serde_json::{Map, Value, json};

    #[derive(Debug, PartialEq)]
    struct Probe {
        name: String,
        tags: Option<Vec<String>>,
        count: u32,
        meta: Option<Map<String, Value>>,
        note: Option<Option<String>>,
    }

    serde_support::deserialize_struct!(Probe {
        name: "name" => required,
        tags: "tags" => optional,
        count: "count" => required,
        meta: "_meta" => optional(DefaultOnError),
        note: "note" => optional(Tri),
    });

    fn probe(name: &str, count: u32) -> Probe {
        Probe { name: name.to_owned(), tags: None, count, meta: None, note: None }
    }

    /// Decodes `text` from a string and, when it is valid JSON, from a `Value` too (another
    /// `MapAccess`): both must agree.
    fn decode(text: &str) -> Result<Probe, String> {
        let from_str = serde_json::from_str::<Probe>(text).map_err(|e| e.to_string());
        if let Ok(value) = serde_json::from_str::<Value>(text) {
            let from_value = serde_json::from_value::<Probe>(value).map_err(|e| e.to_string());
            assert_eq!(from_str.is_ok(), from_value.is_ok(), "{text}: {from_str:?} vs {from_value:?}");
            if let (Ok(a), Ok(b)) = (&from_str, &from_value) {
                assert_eq!(a, b);
            }
        }
        from_str
    }

    #[test]
    fn every_field_lands_in_its_place_and_unknown_members_are_skipped() {
        let text = json!({
            "extra": {"deep": [1, {"x": null}]},
            "count": 7,
            "note": "hi",
            "tags": ["a", "b"],
            "_meta": {"k": true},
            "name": "n",
        })
        .to_string();
        let mut want = probe("n", 7);
        want.tags = Some(vec!["a".into(), "b".into()]);
        want.meta = Some(Map::from_iter([("k".to_owned(), Value::Bool(true))]));
        want.note = Some(Some("hi".into()));
        assert_eq!(decode(&text).unwrap(), want);
    }

    #[test]
    fn absent_optional_fields_are_none_and_null_is_kept_apart() {
        assert_eq!(decode(r#"{"name":"n","count":1}"#).unwrap(), probe("n", 1));
        let mut nulled = probe("n", 1);
        nulled.note = Some(None);
        assert_eq!(decode(r#"{"name":"n","count":1,"note":null}"#).unwrap(), nulled);
    }

    #[test]
    fn a_repeated_member_keeps_its_last_value() {
        let mut want = probe("second", 2);
        want.tags = Some(vec!["y".into()]);
        let text = r#"{"name":"first","tags":["x"],"count":1,"name":"second","tags":["y"],"count":2}"#;
        assert_eq!(decode(text).unwrap(), want);
    }

    #[test]
    fn a_missing_required_field_is_named() {
        let e = decode(r#"{"name":"n","tags":["a"]}"#).unwrap_err();
        assert!(e.starts_with("missing field `count`"), "{e}");
        let e = decode(r#"{"count":1}"#).unwrap_err();
        assert!(e.starts_with("missing field `name`"), "{e}");
    }

    #[test]
    fn a_bad_value_fails_after_earlier_fields_were_written() {
        // The strings read before the failure are dropped with it (Miri reports a leak or a
        // double drop otherwise).
        let e = decode(r#"{"name":"n","tags":["a","b"],"note":"x","count":"seven"}"#).unwrap_err();
        assert!(e.starts_with("invalid type: string \"seven\", expected u32"), "{e}");
        let e = decode(r#"{"name":"n","tags":["a",3],"count":1}"#).unwrap_err();
        assert!(e.starts_with("invalid type: integer `3`, expected a string"), "{e}");
        let e = decode(r#"{"name":"n","name":"m","count":1,"tags":["a"]"#).unwrap_err();
        assert!(e.starts_with("EOF while parsing an object"), "{e}");
    }

    #[test]
    fn a_lenient_field_falls_back_to_its_default() {
        assert_eq!(decode(r#"{"name":"n","count":1,"_meta":5}"#).unwrap(), probe("n", 1));
    }

    #[test]
    fn a_value_that_is_not_an_object_is_refused_by_name() {
        let e = decode(r#"["n", 1]"#).unwrap_err();
        assert!(e.contains("expected a Probe object"), "{e}");
    }
}
// </acp-types only>
