//! Newline-delimited JSON response bodies built from a stream of serializable frames.

use axum::body::Body;
use axum::http::{header::CONTENT_TYPE, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde::Serialize;

/// A `200 application/x-ndjson` response with one JSON value per line.
pub fn ndjson_body<S, T>(frames: S) -> Response
where
    S: Stream<Item = T> + Send + 'static,
    T: Serialize,
{
    let lines = frames.map(|frame| {
        let mut line = serde_json::to_vec(&frame).map_err(std::io::Error::other)?;
        line.push(b'\n');
        Ok::<_, std::io::Error>(Bytes::from(line))
    });
    let mut response = Body::from_stream(lines).into_response();
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn one_value_per_line() {
        let frames =
            futures_util::stream::iter(vec![serde_json::json!({"a":1}), serde_json::json!("b")]);
        let response = ndjson_body(frames);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/x-ndjson");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"{\"a\":1}\n\"b\"\n");
    }
}
