//! `GET /console/login?code=…`: spends a one-time code from `sandboxd console link`
//! for a session cookie, then moves the browser on to `/console/` so the code leaves
//! the address bar; `POST /console/logout` ends the session.

use crate::session::{cookie_token, set_cookie};
use crate::Console;
use axum::extract::{Query, State};
use axum::http::header::{CONTENT_TYPE, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

#[derive(Deserialize)]
pub struct LoginQuery {
    code: Option<String>,
}

/// A same-origin page that moves on to the console: a redirect from a link opened in
/// another site (a chat, a mail) would not carry the SameSite=Strict cookie, a
/// navigation that this page starts does.
const SIGNED_IN: &str = "<!doctype html><html><head><meta charset=\"utf-8\">\
    <meta http-equiv=\"refresh\" content=\"0;url=/console/\"><title>sandboxd</title></head>\
    <body><p>Signed in. <a href=\"/console/\">Open the console</a>.</p></body></html>";

const REFUSED: &str = "<!doctype html><html><head><meta charset=\"utf-8\"><title>sandboxd</title>\
    </head><body><h1>Sign-in link refused</h1><p>This link was used already, has expired, \
    or is not one of this server's. Run <code>sandboxd console link</code> for a new one.</p>\
    </body></html>";

pub async fn login(State(console): State<Console>, query: Query<LoginQuery>) -> Response {
    let html = [(CONTENT_TYPE, "text/html; charset=utf-8")];
    let code = query.0.code.unwrap_or_default();
    let redeemed = match code.is_empty() {
        true => Ok(None),
        false => console.engine.accounts().redeem_console_code(&code),
    };
    match redeemed {
        Ok(Some(workspace)) => {
            tracing::info!(%workspace, "console sign-in");
            let token = console.sessions.start(workspace);
            let cookie = [(SET_COOKIE, set_cookie(Some(&token)))];
            (StatusCode::OK, cookie, html, SIGNED_IN).into_response()
        }
        Ok(None) => (StatusCode::UNAUTHORIZED, html, REFUSED).into_response(),
        Err(e) => crate::error::ApiError::engine(e).into_response(),
    }
}

pub async fn logout(State(console): State<Console>, headers: HeaderMap) -> Response {
    if let Some(token) = cookie_token(&headers) {
        console.sessions.end(token);
    }
    (StatusCode::NO_CONTENT, [(SET_COOKIE, set_cookie(None))]).into_response()
}
