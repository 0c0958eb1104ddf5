//! Stack files (`loupe_store::stacks::decode`), raw and framed with a valid
//! checksum; what decodes round-trips through `encode`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loupe_store::stacks::{decode, encode, KIND_STACKS};

use loupe_fuzz::frame;

fuzz_target!(|data: &[u8]| {
    let _ = decode(data);
    if let Ok(p) = decode(&frame::framed(KIND_STACKS, data)) {
        assert_eq!(decode(&encode(&p)).as_ref(), Ok(&p));
    }
});
