//! Runzivo terminal against a real `sandboxd serve`: tickets (permission, single use,
//! forgery), handshake errors, and a WebSocket PTY: `stty size`, resize, `exit`; a quiet
//! terminal outlives the connection wait timeouts.

mod runzivo_api;

use futures_util::{SinkExt, StreamExt};
use runzivo_api::Server;
use tokio_tungstenite::tungstenite::{self, Message};

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Reads binary output until it contains `want`; returns everything read. Fails (rather
/// than hangs) when nothing more comes for 30 s.
async fn read_until(ws: &mut Ws, want: &str) -> String {
    read_more(ws, String::new(), want).await
}

/// [`read_until`] counting what was `seen` already (output comes in chunks of any size:
/// two awaited strings may arrive in one).
async fn read_more(ws: &mut Ws, mut seen: String, want: &str) -> String {
    while !seen.contains(want) {
        let next = tokio::time::timeout(std::time::Duration::from_secs(30), ws.next()).await;
        let Ok(next) = next else {
            panic!("nothing more within 30 s while waiting for {want:?} in {seen:?}");
        };
        match next.expect("socket open").expect("message") {
            Message::Binary(d) => seen.push_str(&String::from_utf8_lossy(&d)),
            other => panic!("unexpected {other:?} while waiting for {want:?} in {seen:?}"),
        }
    }
    seen
}

fn url(s: &Server, id: &str, query: &str) -> String {
    format!(
        "ws://{}{}?{query}",
        s.addr,
        s.path(&format!("/{id}/terminal"))
    )
}

/// The status and error code of a refused WebSocket handshake.
async fn refused(url: &str) -> (u16, String) {
    match tokio_tungstenite::connect_async(url).await {
        Err(tungstenite::Error::Http(resp)) => {
            let body: serde_json::Value =
                serde_json::from_slice(resp.body().as_deref().unwrap_or(b"")).unwrap_or_default();
            (
                resp.status().as_u16(),
                body["error"]["code"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        }
        Err(e) => panic!("handshake failed without an HTTP answer: {e}"),
        Ok(_) => panic!("handshake accepted"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn terminal_over_websocket_with_single_use_tickets() {
    let s = Server::start(30);
    let id = s.create().await;
    let tickets = s.path(&format!("/{id}/terminal/tickets"));
    s.call("POST", &tickets, Some(&s.keys.reader), None, "")
        .await
        .expect(403, "permission_required");
    s.call("POST", &tickets, None, None, "")
        .await
        .expect(401, "unauthorized");
    let missing = s.path("/sbx_000000000000000000000000/terminal/tickets");
    s.call("POST", &missing, Some(&s.keys.writer), None, "")
        .await
        .expect(404, "sandbox_not_found");
    let issued = s
        .call("POST", &tickets, Some(&s.keys.writer), None, "")
        .await;
    assert_eq!(issued.status, 201);
    let ticket = issued.json()["ticket"].as_str().expect("ticket").to_owned();

    let terminal = s.path(&format!("/{id}/terminal"));
    s.call("GET", &terminal, None, None, "")
        .await
        .expect(401, "unauthorized");
    // Not a WebSocket handshake: refused, and the ticket is not spent.
    s.call(
        "GET",
        &format!("{terminal}?ticket={ticket}"),
        None,
        None,
        "",
    )
    .await
    .expect(400, "invalid_request");
    assert_eq!(
        refused(&url(&s, &id, "")).await,
        (401, "unauthorized".into())
    );
    assert_eq!(
        refused(&url(&s, &id, "ticket=tkt_forged")).await,
        (401, "ticket_invalid".into())
    );

    let (mut ws, _) = tokio_tungstenite::connect_async(url(
        &s,
        &id,
        &format!("ticket={ticket}&cols=100&rows=30"),
    ))
    .await
    .expect("terminal");
    ws.send(Message::Binary("stty size; pwd\n".into()))
        .await
        .unwrap();
    let out = read_until(&mut ws, "30 100").await;
    let after = out.split_once("30 100").map_or("", |(_, rest)| rest);
    read_more(&mut ws, after.to_owned(), "/workspace").await;
    ws.send(Message::Text(
        r#"{"type":"resize","cols":120,"rows":40}"#.into(),
    ))
    .await
    .unwrap();
    ws.send(Message::Binary("stty size\n".into()))
        .await
        .unwrap();
    read_until(&mut ws, "40 120").await;
    ws.send(Message::Binary("exit 3\n".into())).await.unwrap();
    let exit = loop {
        match ws.next().await.expect("socket open").expect("message") {
            Message::Binary(_) => continue,
            Message::Text(t) => {
                break serde_json::from_str::<serde_json::Value>(t.as_str()).unwrap()
            }
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(exit, serde_json::json!({"type":"exit","exit_code":3}));
    match ws.next().await {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.reason.as_str(), "exit 3"),
        other => panic!("expected a close frame, got {other:?}"),
    }

    // Used once: refused again, as is a ticket for another sandbox.
    assert_eq!(
        refused(&url(&s, &id, &format!("ticket={ticket}"))).await,
        (401, "ticket_invalid".into())
    );
    let other = s.create().await;
    let t2 = s
        .call("POST", &tickets, Some(&s.keys.writer), None, "")
        .await
        .json()["ticket"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        refused(&url(&s, &other, &format!("ticket={t2}"))).await,
        (401, "ticket_invalid".into())
    );
}

/// A client's message is bounded (a frame to 64 KiB, a message to 256 KiB): one that
/// goes on past it, unfinished, ends its socket with 1009 (it was held in the server's
/// memory up to axum's 64 MiB a socket).
#[tokio::test(flavor = "multi_thread")]
async fn an_unfinished_message_past_its_bound_ends_the_terminal() {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    let s = Server::start(30);
    let id = s.create().await;
    let mut ws = s.terminal(&id, "").await;
    let chunk = vec![b'x'; 32 << 10];
    let first = Frame::message(chunk.clone(), OpCode::Data(Data::Binary), false);
    ws.send(Message::Frame(first))
        .await
        .expect("first fragment");
    // 1 MiB in fragments, never finished; the server may close before all are sent.
    for _ in 0..32 {
        let more = Frame::message(chunk.clone(), OpCode::Data(Data::Continue), false);
        if ws.send(Message::Frame(more)).await.is_err() {
            break;
        }
    }
    let ended = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return None,
            }
        }
    })
    .await
    .expect("the terminal stayed open with an unfinished 1 MiB message");
    assert!(matches!(ended, Some(1009) | None), "closed with {ended:?}");
}

/// A terminal is an upgraded connection, not one waiting for a request: quiet past the
/// idle and header-read timeouts, it stays open and answers.
#[tokio::test(flavor = "multi_thread")]
async fn a_terminal_quiet_past_the_wait_timeouts_stays_open() {
    let s = Server::start_with_env(
        30,
        &[
            ("SANDBOXD_IDLE_TIMEOUT_SECONDS", "1"),
            ("SANDBOXD_HEADER_READ_TIMEOUT_SECONDS", "1"),
        ],
    );
    let id = s.create().await;
    let mut ws = s.terminal(&id, "").await;
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    ws.send(Message::Binary("echo still-$((20+22))\n".into()))
        .await
        .expect("send after the quiet spell");
    read_until(&mut ws, "still-42").await;
}
