//! A typed value whose decoding is left to the code that reads it.
//!
//! The latency widget speaks the same protocol as the router page, so every
//! variant's decoder would be linked into its first load, whether it ever
//! receives that variant or not. The generating studies' runs (every
//! request's record and every iteration) and plans cost it some 23 KB
//! gzipped, past its 250 KB budget. A [`Deferred<T>`] crosses the boundary
//! as the JSON of a `T` in a string: its type is still `T` on both sides,
//! but `T`'s decoder is linked only where [`Deferred::decode`] is called
//! (the page's card), and its encoder only where [`Deferred::encode`] is.
//!
//! A string, not serde_json's `RawValue` embedded as JSON: the messages
//! are internally tagged enums, which serde reads through a buffer that a
//! raw value cannot be taken from (every message carrying one failed to
//! parse on the page). The price is the escaping of the inner quotes.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A `T` as JSON, decoded on demand.
pub struct Deferred<T> {
    json: String,
    of: PhantomData<fn() -> T>,
}

impl<T: Serialize> Deferred<T> {
    pub fn encode(value: &T) -> Deferred<T> {
        // Serialising plain data to JSON does not fail (no maps with
        // non-string keys among the workbench's types).
        Deferred { json: serde_json::to_string(value).expect("plain data serialises to JSON"), of: PhantomData }
    }
}

impl<T: DeserializeOwned> Deferred<T> {
    pub fn decode(&self) -> Result<T, String> {
        serde_json::from_str(&self.json).map_err(|e| format!("a malformed message from the worker: {e}"))
    }
}

impl<T> Clone for Deferred<T> {
    fn clone(&self) -> Self {
        Deferred { json: self.json.clone(), of: PhantomData }
    }
}

impl<T> std::fmt::Debug for Deferred<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Deferred({} bytes)", self.json.len())
    }
}

impl<T> PartialEq for Deferred<T> {
    fn eq(&self, other: &Self) -> bool {
        self.json == other.json
    }
}

impl<T> Serialize for Deferred<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(serializer)
    }
}

impl<'de, T> Deserialize<'de> for Deferred<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Deferred { json: String::deserialize(deserializer)?, of: PhantomData })
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

    /// Internally tagged, as the protocol's messages are.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Message {
        Outer { inner: Deferred<Inner> },
    }

    #[test]
    fn a_deferred_value_round_trips_inside_a_tagged_message() {
        let inner = Inner { name: "a \"quoted\" name".into(), values: vec![1.5, 2.0] };
        let text = serde_json::to_string(&Message::Outer { inner: Deferred::encode(&inner) }).unwrap();
        let Message::Outer { inner: back } = serde_json::from_str(&text).unwrap();
        assert_eq!(back.decode().unwrap(), inner);
        let wrong: Deferred<Inner> = serde_json::from_str(r#""[1, 2]""#).unwrap();
        assert!(wrong.decode().unwrap_err().contains("malformed"));
    }
}
