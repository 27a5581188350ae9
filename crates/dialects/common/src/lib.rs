//! Dialect-neutral HTTP pieces every API dialect reuses: bearer-key extraction, a strict
//! size-capped JSON body reader, a request body's pace, timestamp formats, NDJSON streaming and `no-store`.

pub mod auth;
pub mod body_pace;
pub mod held;
pub mod json;
pub mod ndjson;
pub mod no_store;
pub mod openapi;
pub mod time_fmt;
pub mod usage;

pub use auth::bearer_token;
pub use body_pace::{body_io_error, paced, BodyPace, BodyTooSlow};
pub use held::held;
pub use json::{read_json, JsonBodyError};
pub use ndjson::ndjson_body;
pub use no_store::no_store;
pub use time_fmt::{http_date, rfc3339_nanos};
