//! Tying something the engine lends a request (an exec's room in the output budget) to
//! its response body, so it is given back only once the answer is sent or dropped.

use axum::body::Body;
use axum::response::Response;
use futures_util::StreamExt;

/// `response`, whose body keeps `hold` until it has been sent (or its client went away).
pub fn held<H: Send + Sync + 'static>(response: Response, hold: H) -> Response {
    response.map(|body| {
        Body::from_stream(body.into_data_stream().map(move |chunk| {
            let _held = &hold;
            chunk
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn the_hold_lives_as_long_as_the_body() {
        let hold = Arc::new(());
        let response = held(Response::new(Body::from("answer")), hold.clone());
        assert_eq!(Arc::strong_count(&hold), 2);
        let body = response.into_body();
        let bytes = axum::body::to_bytes(body, 1024).await.unwrap();
        assert_eq!(&bytes[..], b"answer");
        assert_eq!(Arc::strong_count(&hold), 1, "sent: given back");
    }
}
