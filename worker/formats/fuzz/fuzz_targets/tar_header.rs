//! Arbitrary 512-byte blocks through the tar header parser. A header it
//! accepts as a plain file must survive a round trip through the writer
//! (`file_header`, used by `stoker pack`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use stoker_formats::tar::{file_header, parse_header};

fuzz_target!(|data: &[u8]| {
    let mut block = [0u8; 512];
    let n = data.len().min(512);
    block[..n].copy_from_slice(&data[..n]);
    let Ok(Some(header)) = parse_header(&block, 0) else {
        return;
    };
    // The writer's octal size field holds 11 digits; longer names go
    // through a GNU long-name member first.
    if header.name.len() <= 100 && header.size < 8u64.pow(11) {
        let written = file_header(&header.name, header.size, 0);
        let again: &[u8; 512] = written[..512].try_into().expect("one block");
        let reparsed = parse_header(again, 0)
            .expect("own header parses")
            .expect("not an end block");
        assert_eq!(
            (reparsed.name.as_str(), reparsed.size),
            (header.name.as_str(), header.size)
        );
    }
});
