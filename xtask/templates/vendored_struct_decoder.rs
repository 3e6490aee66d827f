/// Decodes the next map value with the helper `H`.
#[doc(hidden)]
pub fn next_lenient<'de, H: Lenient<T>, T, A: serde::de::MapAccess<'de>>(map: &mut A) -> Result<T, A::Error> {
    map.next_value::<Via<H, T>>().map(|via| via.0)
}

/// Implements a streaming `Deserialize` for a plain struct: one pass over the map, unknown
/// keys skipped, a repeated member replacing the earlier value, absent optional fields `None`,
/// the first absent required field named. Each field is `name: "wire" => required | optional`,
/// optionally with a [`Lenient`] marker (`required(Marker)`). This is the vendored file's
/// decoder, in safe code; `acp-types` reads the same fields through a shared field table.
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
