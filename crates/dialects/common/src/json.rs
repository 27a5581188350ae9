//! A strict JSON request-body reader: `application/json` only, a byte cap, exactly one
//! value, and serde's own rejection of unknown fields and wrong types.

use axum::body::Body;
use axum::http::{header::CONTENT_TYPE, HeaderMap};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;

/// Why a JSON body was refused. Each dialect renders these in its own error shape.
#[derive(Debug, thiserror::Error)]
pub enum JsonBodyError {
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    #[error("request body exceeds {limit} bytes")]
    TooLarge { limit: usize },
    /// The client stopped sending its body, or sent it slower than the server's pace.
    #[error("{0}")]
    TooSlow(crate::BodyTooSlow),
    #[error("request body could not be read")]
    Read(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("request body is empty")]
    Empty,
    /// Not JSON, truncated JSON, or more than one JSON value.
    #[error("request body is not a single JSON value: {0}")]
    Syntax(#[source] serde_json::Error),
    /// Valid JSON whose shape is wrong: unknown or missing field, wrong type.
    #[error("{0}")]
    Shape(#[source] serde_json::Error),
}

/// Whether the request declares a JSON body (`application/json`, parameters allowed).
pub fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// Reads the whole body, refusing more than `limit` bytes.
pub async fn read_capped(body: Body, limit: usize) -> Result<bytes::Bytes, JsonBodyError> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) if err.downcast_ref::<LengthLimitError>().is_some() => {
            Err(JsonBodyError::TooLarge { limit })
        }
        Err(err) => match crate::BodyTooSlow::in_chain(&*err) {
            Some(slow) => Err(JsonBodyError::TooSlow(slow.clone())),
            None => Err(JsonBodyError::Read(err)),
        },
    }
}

/// Parses exactly one JSON value of type `T` from `bytes`.
pub fn parse_strict<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, JsonBodyError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(JsonBodyError::Empty);
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = T::deserialize(&mut de).map_err(classify)?;
    de.end().map_err(JsonBodyError::Syntax)?;
    Ok(value)
}

/// Checks the Content-Type, reads at most `limit` bytes and parses one `T`.
pub async fn read_json<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<T, JsonBodyError> {
    if !is_json(headers) {
        return Err(JsonBodyError::UnsupportedMediaType);
    }
    parse_strict(&read_capped(body, limit).await?)
}

/// Like [`read_json`] for routes whose body is optional: an empty body is `None`
/// whatever its Content-Type.
pub async fn read_optional_json<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Option<T>, JsonBodyError> {
    let bytes = read_capped(body, limit).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    if !is_json(headers) {
        return Err(JsonBodyError::UnsupportedMediaType);
    }
    parse_strict(&bytes).map(Some)
}

fn classify(err: serde_json::Error) -> JsonBodyError {
    match err.classify() {
        serde_json::error::Category::Data => JsonBodyError::Shape(err),
        _ => JsonBodyError::Syntax(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Req {
        n: u32,
    }

    fn json_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/json; charset=utf-8"),
        );
        h
    }

    async fn read(body: &'static str) -> Result<Req, JsonBodyError> {
        read_json(&json_headers(), Body::from(body), 16).await
    }

    #[tokio::test]
    async fn accepts_one_value() {
        assert_eq!(read(" {\"n\":3} \n").await.unwrap(), Req { n: 3 });
    }

    #[tokio::test]
    async fn classifies_failures() {
        assert!(matches!(read("").await, Err(JsonBodyError::Empty)));
        assert!(matches!(
            read("{\"n\":").await,
            Err(JsonBodyError::Syntax(_))
        ));
        assert!(matches!(
            read("{\"n\":1}{}").await,
            Err(JsonBodyError::Syntax(_))
        ));
        assert!(matches!(
            read("{\"n\":\"x\"}").await,
            Err(JsonBodyError::Shape(_))
        ));
        assert!(matches!(
            read("{\"n\":1,\"m\":2}").await,
            Err(JsonBodyError::Shape(_))
        ));
        assert!(matches!(
            read("{\"n\":1}            ").await,
            Err(JsonBodyError::TooLarge { .. })
        ));
    }

    #[tokio::test]
    async fn requires_json_content_type() {
        let err = read_json::<Req>(&HeaderMap::new(), Body::from("{\"n\":1}"), 16).await;
        assert!(matches!(err, Err(JsonBodyError::UnsupportedMediaType)));
    }

    #[tokio::test]
    async fn optional_body_may_be_empty() {
        let none = read_optional_json::<Req>(&HeaderMap::new(), Body::empty(), 16).await;
        assert!(matches!(none, Ok(None)));
        let some = read_optional_json::<Req>(&json_headers(), Body::from("{\"n\":2}"), 16).await;
        assert_eq!(some.unwrap(), Some(Req { n: 2 }));
    }
}
