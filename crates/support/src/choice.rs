//! The settings that take one of a few words (`chat_listen`, `task_listen`, `permissions.mode`,
//! `llm.max_tokens_field`): read through serde's own derive, so each word is written once (its
//! `rename_all`), with an error that lists the words a setting takes. (The `config` crate's own
//! words for a bad one name the Rust enum and none of its values.)

use serde::de::{DeserializeOwned, Deserializer, Error as _, Visitor};
use serde::{Deserialize, forward_to_deserialize_any};

/// `deserialize_with` for a field holding one of an enum's words.
pub fn one_of<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let word = String::deserialize(deserializer)?;
    let parsed: Result<T, serde::de::value::Error> =
        T::deserialize(serde::de::value::StrDeserializer::<serde::de::value::Error>::new(&word));
    parsed.map_err(|_| {
        let words: Vec<String> = words::<T>().iter().map(|word| format!("\"{word}\"")).collect();
        D::Error::custom(format!("{word:?} is not one of {}", words.join(", ")))
    })
}

/// The words an enum is written as: what its derived `Deserialize` hands to `deserialize_enum`.
pub fn words<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut found: &'static [&'static str] = &[];
    let _ = T::deserialize(Words(&mut found));
    found
}

/// A deserializer that only records the variant names it is asked for, and fails.
struct Words<'a>(&'a mut &'static [&'static str]);

impl<'de> Deserializer<'de> for Words<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
        Err(Self::Error::custom("not an enum"))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = variants;
        Err(Self::Error::custom("only the names were asked for"))
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}
