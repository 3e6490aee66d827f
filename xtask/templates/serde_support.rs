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

/// Decodes a variant's payload type from the union object (the tag is ignored as an unknown field).
pub fn payload<T: DeserializeOwned, E: serde::de::Error>(value: &Map<String, Value>) -> Result<T, E> {
    T::deserialize(MapRef(value)).map_err(E::custom)
}

/// Decodes a variant that carries a single property.
pub fn property<T: DeserializeOwned, E: serde::de::Error>(value: &Map<String, Value>, name: &'static str) -> Result<T, E> {
    match value.get(name) {
        Some(v) => T::deserialize(v).map_err(E::custom),
        None => Err(E::missing_field(name)),
    }
}

/// A borrowed map as a deserializer, so a payload decodes without copying the object.
struct MapRef<'a>(&'a Map<String, Value>);

impl<'de> Deserializer<'de> for MapRef<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_map(serde::de::value::MapDeserializer::new(self.0.iter().map(|(k, v)| (k.as_str(), v))))
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
