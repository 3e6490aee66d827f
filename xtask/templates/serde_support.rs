//! Serde helpers shared by the generated types: lenient decoding (`x-deserialize-default-on-error`,
//! `x-deserialize-skip-invalid-items`) and the hand-written half of the tagged unions.

use serde::de::DeserializeOwned;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A union variant this version of the schema does not know: the whole object as received,
/// tag included, written back unchanged.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UnknownVariant(pub Map<String, Value>);

impl UnknownVariant {
    /// The value of the tag property `tag`, if it is a string.
    pub fn tag(&self, tag: &str) -> Option<&str> {
        self.0.get(tag).and_then(Value::as_str)
    }
}

/// A `number` written as JavaScript writes it (`JSON.stringify`, what most ACP peers use): a
/// finite integral value within ±2^53 without a fraction (`1`, not `1.0`), any other as a float.
/// The Rust type stays `f64`; decoding accepts both forms.
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

impl<T: JsonNumber> JsonNumber for std::collections::BTreeMap<String, T> {
    fn serialize_number<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter().map(|(k, v)| (k, Number(v))))
    }
}

/// A value holding numbers, serialised through [`JsonNumber`].
pub struct Number<'a, T: ?Sized>(pub &'a T);

impl<T: JsonNumber + ?Sized> Serialize for Number<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize_number(serializer)
    }
}

/// `serialize_with` for fields and variants holding numbers (see [`JsonNumber`]).
pub fn number<T: JsonNumber + ?Sized, S: Serializer>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
    value.serialize_number(serializer)
}

/// A malformed value decodes as the type's default instead of failing the whole message.
pub fn default_on_error<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(d: D) -> Result<T, D::Error> {
    let value = Value::deserialize(d)?;
    Ok(T::deserialize(value).unwrap_or_default())
}

fn items<T: DeserializeOwned>(items: Vec<Value>) -> Vec<T> {
    items.into_iter().filter_map(|item| T::deserialize(item).ok()).collect()
}

/// An array whose malformed items are dropped; anything but an array is an error.
pub fn vec_skip_invalid<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(items(Vec::<Value>::deserialize(d)?))
}

/// An array whose malformed items are dropped; anything but an array decodes as empty.
pub fn vec_skip_invalid_or_default<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(values) => items(values),
        _ => Vec::new(),
    })
}

/// An optional array whose malformed items are dropped; `null` is `None`.
pub fn opt_vec_skip_invalid<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<Vec<T>>, D::Error> {
    Ok(Option::<Vec<Value>>::deserialize(d)?.map(items))
}

/// An optional array whose malformed items are dropped; anything but an array is `None`.
pub fn opt_vec_skip_invalid_or_default<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<Vec<T>>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(values) => Some(items(values)),
        _ => None,
    })
}

/// An optional field whose type holds `null` itself (any JSON value) that is present: `null`
/// is `Some(Value::Null)`, so it stays apart from absent (`None`).
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// An optional, nullable field that is present: `null` is `Some(None)`, a value `Some(Some(v))`.
pub fn tri<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// As [`tri`], with a malformed value read as absent.
pub fn tri_or_default<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Null => Some(None),
        value => T::deserialize(value).ok().map(Some),
    })
}

/// As [`tri`] for an array whose malformed items are dropped.
pub fn tri_vec_skip_invalid<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<Option<Vec<T>>>, D::Error> {
    Ok(Some(Option::<Vec<Value>>::deserialize(d)?.map(items)))
}

/// As [`tri_vec_skip_invalid`], with anything but an array or `null` read as absent.
pub fn tri_vec_skip_invalid_or_default<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Option<Option<Vec<T>>>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Null => Some(None),
        Value::Array(values) => Some(Some(items(values))),
        _ => None,
    })
}

/// A result that peers write as `null` when it has nothing to say (`fs/write_text_file`,
/// `session/load`): read as the empty object, which the result types accept.
pub fn null_as_empty<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    match Option::<T>::deserialize(d)? {
        Some(value) => Ok(value),
        None => T::deserialize(serde::de::value::MapDeserializer::<_, D::Error>::new(std::iter::empty::<(&str, ())>())),
    }
}

/// Reads a union value, which must be a JSON object.
pub fn object<'de, D: Deserializer<'de>>(d: D) -> Result<Map<String, Value>, D::Error> {
    Map::deserialize(d)
}

/// The tag of a union value: `None` when the property is absent, an error when it is not a string.
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
pub fn payload<T: DeserializeOwned, E: serde::de::Error>(value: &Map<String, Value>, tag: &'static str) -> Result<T, E> {
    T::deserialize(MapRef(value, tag)).map_err(E::custom)
}

/// Decodes a variant that carries a single property.
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
        let skip = self.1;
        let entries = self.0.iter().filter(move |(k, _)| k.as_str() != skip).map(|(k, v)| (k.as_str(), v));
        visitor.visit_map(serde::de::value::MapDeserializer::new(entries))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

/// Writes `{tag: name}`.
pub fn serialize_tag<S: Serializer>(serializer: S, tag: &'static str, name: &'static str) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(1))?;
    map.serialize_entry(tag, name)?;
    map.end()
}

/// Writes `{tag: name, property: value}`.
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
pub fn serialize_property<S: Serializer, T: Serialize>(serializer: S, property: &'static str, value: &T) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(1))?;
    map.serialize_entry(property, value)?;
    map.end()
}

/// Writes the payload's properties after `{tag: name}`.
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

/// A way of decoding one field's value into `T` (a marker per helper function above), used
/// by the generated `Deserialize` impls through [`next_lenient`].
pub trait Lenient<T> {
    fn decode<'de, D: Deserializer<'de>>(d: D) -> Result<T, D::Error>;
}

struct Via<H, T>(T, std::marker::PhantomData<H>);

impl<'de, H: Lenient<T>, T> Deserialize<'de> for Via<H, T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        H::decode(d).map(|value| Via(value, std::marker::PhantomData))
    }
}

/// Decodes the next map value with the helper `H`.
pub fn next_lenient<'de, H: Lenient<T>, T, A: serde::de::MapAccess<'de>>(map: &mut A) -> Result<T, A::Error> {
    map.next_value::<Via<H, T>>().map(|via| via.0)
}

macro_rules! lenient_markers {
    ($($(#[$doc:meta])* $marker:ident: $helper:ident => $out:ty, where [$($bound:tt)*];)*) => {$(
        $(#[$doc])*
        pub enum $marker {}
        impl<T: $($bound)*> Lenient<$out> for $marker {
            fn decode<'de, D: Deserializer<'de>>(d: D) -> Result<$out, D::Error> {
                $helper(d)
            }
        }
    )*};
}

lenient_markers! {
    /// [`default_on_error`]
    DefaultOnError: default_on_error => T, where [DeserializeOwned + Default];
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

/// [`tri`]
pub enum Tri {}
impl<T: for<'a> Deserialize<'a>> Lenient<Option<Option<T>>> for Tri {
    fn decode<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
        Option::<T>::deserialize(d).map(Some)
    }
}

/// [`present`]
pub enum Present {}
impl<T: for<'a> Deserialize<'a>> Lenient<Option<T>> for Present {
    fn decode<'de, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
        T::deserialize(d).map(Some)
    }
}

/// Implements a streaming `Deserialize` for a plain struct: one pass over the map, unknown
/// keys skipped. Each field is `name: "wire" => required | optional`, optionally with a
/// [`Lenient`] marker (`required(Marker)`). Compared with serde's derive there is no
/// field-identifier type, no sequence form and no wrapper type per lenient field, which keeps
/// the generated crate quick to compile.
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
                    #[allow(unused_mut)]
                    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<$name, A::Error> {
                        $($(#[$cfg])* let mut $field = None;)*
                        while let Some(key) = map.next_key::<serde_support::Key<'de>>()? {
                            match key.as_str() {
                                $($(#[$cfg])* $wire => $field = serde_support::deserialize_struct!(@value $how map $($marker)?),)*
                                _ => {
                                    map.next_value::<serde::de::IgnoredAny>()?;
                                }
                            }
                        }
                        Ok($name { $($(#[$cfg])* $field: serde_support::deserialize_struct!(@finish $how $field $wire),)* })
                    }
                }
                deserializer.deserialize_map(Visitor)
            }
        }
    };
    (@value required $map:ident) => { Some($map.next_value()?) };
    (@value required $map:ident $marker:ident) => { Some(serde_support::next_lenient::<serde_support::$marker, _, _>(&mut $map)?) };
    (@value optional $map:ident) => { $map.next_value()? };
    (@value optional $map:ident $marker:ident) => { serde_support::next_lenient::<serde_support::$marker, _, _>(&mut $map)? };
    (@finish required $field:ident $wire:literal) => { $field.ok_or_else(|| serde::de::Error::missing_field($wire))? };
    (@finish optional $field:ident $wire:literal) => { $field };
}
pub(crate) use deserialize_struct;
