//! The names of an enum's values as serde spells them (`rename_all` and `rename` included), for
//! labels, messages and parsers: derived once from the type, never spelled again in a table.
//!
//! [`variant_name`] serializes a value into a serializer that keeps only the variant's name
//! (a unit, newtype, tuple or struct variant; the `type` of an adjacently tagged one: an
//! internally tagged enum's tag is written as a borrowed string, so it has none);
//! [`from_name`] deserializes a unit variant from its name.

use serde::de::DeserializeOwned;
use serde::ser::{self, Impossible, Serialize};

/// The serde name of `value`'s variant (`""` for a value that is no enum's).
pub fn variant_name<T: Serialize + ?Sized>(value: &T) -> &'static str {
    value.serialize(NameOf).unwrap_or_default()
}

/// The unit variant serde names `name`, if there is one.
pub fn from_name<T: DeserializeOwned>(name: &str) -> Option<T> {
    parse_name(name).ok()
}

/// The unit variant serde names `name`; the error lists the names there are, in the words of
/// the rest of the harness's messages (``expected `a`, `b` or `c`, got `x` ``).
pub fn parse_name<T: DeserializeOwned>(name: &str) -> Result<T, String> {
    use serde::de::IntoDeserializer;
    let deserializer: serde::de::value::StrDeserializer<'_, serde::de::value::Error> =
        name.into_deserializer();
    T::deserialize(deserializer).map_err(|err| reworded(&err.to_string(), name))
}

/// Serde's ``unknown variant `x`, expected one of `a`, `b`, `c` `` as
/// ``expected `a`, `b` or `c`, got `x` ``; any other message as serde wrote it.
fn reworded(message: &str, name: &str) -> String {
    let Some(expected) = message
        .strip_prefix("unknown variant `")
        .and_then(|rest| rest.strip_prefix(name))
        .and_then(|rest| rest.strip_prefix("`, expected "))
    else {
        return message.to_owned();
    };
    let expected = match expected.strip_prefix("one of ") {
        Some(list) => match list.rsplit_once(", ") {
            Some((head, last)) => format!("{head} or {last}"),
            None => list.to_owned(),
        },
        None => expected.to_owned(),
    };
    format!("expected {expected}, got `{name}`")
}

/// Gives each enum it names `as_str` (its value's serde name) and `FromStr` (from that name,
/// with serde's error): the names are spelled once, by the serde attributes, never in a table.
/// A value serde does not write (the `skip_serializing` fallback that reads a newer peer's
/// names) is `unknown`.
///
/// ```
/// #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
/// #[serde(rename_all = "snake_case")]
/// enum Mode { FastPath, Slow }
/// sandbox_protocol::serde_names!(Mode);
/// assert_eq!(Mode::FastPath.as_str(), "fast_path");
/// assert_eq!("slow".parse::<Mode>(), Ok(Mode::Slow));
/// ```
#[macro_export]
macro_rules! serde_names {
    ($($ty:ty),+ $(,)?) => {$(
        impl $ty {
            /// Its name, as serde spells it on the wire and in the log.
            pub fn as_str(self) -> &'static str {
                match $crate::names::variant_name(&self) {
                    "" => "unknown",
                    name => name,
                }
            }
        }

        impl ::std::str::FromStr for $ty {
            type Err = String;

            fn from_str(text: &str) -> Result<Self, String> {
                $crate::names::parse_name(text)
            }
        }
    )+};
}

/// Why a value has no variant name.
#[derive(Debug)]
pub struct NoName;

impl std::fmt::Display for NoName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not an enum's variant")
    }
}

impl std::error::Error for NoName {}

impl ser::Error for NoName {
    fn custom<M: std::fmt::Display>(_: M) -> NoName {
        NoName
    }
}

struct NameOf;

/// The name of a tagged enum's value: its tag field's.
struct Tagged(Option<&'static str>);

macro_rules! no_name {
    ($($method:ident($($arg:ty),*)),* $(,)?) => {
        $(fn $method(self, $(_: $arg),*) -> Result<&'static str, NoName> { Err(NoName) })*
    };
}

impl ser::Serializer for NameOf {
    type Ok = &'static str;
    type Error = NoName;
    type SerializeSeq = Impossible<&'static str, NoName>;
    type SerializeTuple = Impossible<&'static str, NoName>;
    type SerializeTupleStruct = Impossible<&'static str, NoName>;
    type SerializeTupleVariant = Named;
    type SerializeMap = Impossible<&'static str, NoName>;
    type SerializeStruct = Tagged;
    type SerializeStructVariant = Named;

    no_name!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_none(),
        serialize_unit(),
        serialize_unit_struct(&'static str),
    );

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<&'static str, NoName> {
        value.serialize(NameOf)
    }

    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<&'static str, NoName> {
        Ok(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<&'static str, NoName> {
        value.serialize(NameOf)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: &T,
    ) -> Result<&'static str, NoName> {
        Ok(variant)
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, NoName> {
        Err(NoName)
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, NoName> {
        Err(NoName)
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, NoName> {
        Err(NoName)
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, NoName> {
        Ok(Named(variant))
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, NoName> {
        Err(NoName)
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, NoName> {
        Ok(Tagged(None))
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, NoName> {
        Ok(Named(variant))
    }
}

/// A variant whose fields do not matter: its name is known already.
struct Named(&'static str);

impl ser::SerializeTupleVariant for Named {
    type Ok = &'static str;
    type Error = NoName;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, _: &T) -> Result<(), NoName> {
        Ok(())
    }

    fn end(self) -> Result<&'static str, NoName> {
        Ok(self.0)
    }
}

impl ser::SerializeStructVariant for Named {
    type Ok = &'static str;
    type Error = NoName;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        _: &'static str,
        _: &T,
    ) -> Result<(), NoName> {
        Ok(())
    }

    fn end(self) -> Result<&'static str, NoName> {
        Ok(self.0)
    }
}

impl ser::SerializeStruct for Tagged {
    type Ok = &'static str;
    type Error = NoName;

    /// The first field whose value is a variant's name is the tag (`type`, serialized as a
    /// unit variant by serde's adjacently tagged enums).
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        _: &'static str,
        value: &T,
    ) -> Result<(), NoName> {
        if self.0.is_none() {
            self.0 = value.serialize(NameOf).ok();
        }
        Ok(())
    }

    fn end(self) -> Result<&'static str, NoName> {
        self.0.ok_or(NoName)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize, Debug, PartialEq, Clone, Copy)]
    #[serde(rename_all = "snake_case")]
    enum Plain {
        TurnLimit,
        #[serde(rename = "verifier_failed")]
        NoVerdict,
    }

    #[derive(Serialize)]
    #[serde(tag = "type", content = "data", rename_all = "snake_case")]
    enum Adjacent {
        SessionStarted { id: u32 },
        ToolCall(u32),
    }

    #[test]
    fn names_are_serdes_renames_included() {
        assert_eq!(variant_name(&Plain::TurnLimit), "turn_limit");
        assert_eq!(variant_name(&Plain::NoVerdict), "verifier_failed");
        assert_eq!(
            from_name::<Plain>("verifier_failed"),
            Some(Plain::NoVerdict)
        );
        assert_eq!(from_name::<Plain>("no_verdict"), None);
        assert_eq!(
            variant_name(&Adjacent::SessionStarted { id: 1 }),
            "session_started"
        );
        assert_eq!(variant_name(&Adjacent::ToolCall(3)), "tool_call");
        assert_eq!(variant_name(&Some(Plain::TurnLimit)), "turn_limit");
        assert_eq!(variant_name(&3u32), "");
    }
}
