//! `.prof` files (`loupe_store::format::decode`): the raw input, and the input
//! framed as a flat profile with a valid checksum so that the fuzzer reaches
//! the body. A decoded profile must encode to bytes that decode to it again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loupe_store::format::{decode, encode, KIND_FLAT};

use loupe_fuzz::frame;

fuzz_target!(|data: &[u8]| {
    let _ = decode(data);
    if let Ok(p) = decode(&frame::framed(KIND_FLAT, data)) {
        assert_eq!(decode(&encode(&p)).as_ref(), Ok(&p));
    }
});
