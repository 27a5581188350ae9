//! Runzivo sandbox ids and terminal tickets: a forged ticket never redeems.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandboxd_dialect_runzivo::ids::is_valid;
use sandboxd_dialect_runzivo::tickets::{Grant, Tickets};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let _ = is_valid(s);
    let tickets = Tickets::default();
    let grant = Grant { workspace: "w".into(), sandbox_id: s.into() };
    assert!(tickets.redeem(s, &grant).is_none(), "an unissued ticket redeemed");
});
