//! A typed value whose decoding is left to the code that reads it.
//!
//! The latency widget speaks the same protocol as the router page, so every
//! variant's decoder would be linked into its first load, whether it ever
//! receives that variant or not. The generating studies' runs (every
//! request's record and every iteration) and plans cost it some 23 KB
//! gzipped, past its 250 KB budget. A [`Deferred<T>`] crosses the boundary
//! as the JSON of a `T` kept raw: its type is still `T` on both sides, but
//! `T`'s decoder is linked only where [`Deferred::decode`] is called (the
//! page's card), and its encoder only where [`Deferred::encode`] is.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

/// A `T` as JSON, decoded on demand.
pub struct Deferred<T> {
    raw: Box<RawValue>,
    of: PhantomData<fn() -> T>,
}

impl<T: Serialize> Deferred<T> {
    pub fn encode(value: &T) -> Deferred<T> {
        // Serialising plain data to JSON does not fail (no maps with
        // non-string keys among the workbench's types).
        let text = serde_json::to_string(value).expect("plain data serialises to JSON");
        Deferred { raw: RawValue::from_string(text).expect("serde_json wrote valid JSON"), of: PhantomData }
    }
}

impl<T: DeserializeOwned> Deferred<T> {
    pub fn decode(&self) -> Result<T, String> {
        serde_json::from_str(self.raw.get()).map_err(|e| format!("a malformed message from the worker: {e}"))
    }
}

impl<T> Clone for Deferred<T> {
    fn clone(&self) -> Self {
        Deferred { raw: self.raw.clone(), of: PhantomData }
    }
}

impl<T> std::fmt::Debug for Deferred<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Deferred({} bytes)", self.raw.get().len())
    }
}

impl<T> PartialEq for Deferred<T> {
    fn eq(&self, other: &Self) -> bool {
        self.raw.get() == other.raw.get()
    }
}

impl<T> Serialize for Deferred<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

impl<'de, T> Deserialize<'de> for Deferred<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Deferred { raw: Box::<RawValue>::deserialize(deserializer)?, of: PhantomData })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Inner {
        name: String,
        values: Vec<f64>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Outer {
        inner: Deferred<Inner>,
    }

    #[test]
    fn a_deferred_value_round_trips_inside_a_message() {
        let inner = Inner { name: "a \"quoted\" name".into(), values: vec![1.5, 2.0] };
        let text = serde_json::to_string(&Outer { inner: Deferred::encode(&inner) }).unwrap();
        // Embedded as JSON, not as a string of JSON.
        assert!(text.starts_with(r#"{"inner":{"name":"#), "{text}");
        let back: Outer = serde_json::from_str(&text).unwrap();
        assert_eq!(back.inner.decode().unwrap(), inner);
        let wrong: Deferred<Inner> = serde_json::from_str("[1, 2]").unwrap();
        assert!(wrong.decode().unwrap_err().contains("malformed"));
    }
}
