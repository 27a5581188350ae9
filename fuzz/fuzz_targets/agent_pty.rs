//! The PTY frame codec: arbitrary bytes decode into frames that re-encode identically.
#![no_main]
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sandboxd_agent_protocol::pty::PtyFrame;

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(frame)) = PtyFrame::decode(&mut buf) {
        let mut again = BytesMut::from(&frame.encode()[..]);
        let round = PtyFrame::decode(&mut again).expect("re-decode").expect("whole frame");
        assert_eq!(round, frame);
        assert!(again.is_empty());
    }
});
