//! `fencing::FencedFile`: only the highest token's writes land, whatever
//! order writers in several threads come in.

use std::sync::Arc;

use distlock_file::fencing::FencedFile;

#[test]
fn writers_in_any_order_leave_the_highest_tokens_contents() {
    let dir = tempfile::tempdir().unwrap();
    let file = Arc::new(FencedFile::new(dir.path().join("state")));
    assert_eq!(file.token().unwrap(), None);
    // Tokens in a scrambled order, from 16 threads at once.
    let tokens: Vec<u64> = (0..16).map(|i| (i * 7) % 16 + 100).collect();
    let writers: Vec<_> = tokens
        .iter()
        .map(|&token| {
            let file = file.clone();
            std::thread::spawn(move || (token, file.write(token, token.to_string().as_bytes())))
        })
        .collect();
    for writer in writers {
        let (token, written) = writer.join().unwrap();
        // The highest token can never be refused.
        if token == 115 {
            assert!(written.unwrap());
        }
    }
    assert_eq!(file.token().unwrap(), Some(115));
    assert_eq!(std::fs::read_to_string(file.path()).unwrap(), "115");
    assert!(!file.write(114, b"stale").unwrap());
    assert!(
        file.write(115, b"again").unwrap(),
        "the holder writes again"
    );
    assert_eq!(std::fs::read_to_string(file.path()).unwrap(), "again");
}

#[test]
fn a_fence_that_holds_no_token_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = FencedFile::new(dir.path().join("state"));
    std::fs::write(dir.path().join("state.fence"), "not a token").unwrap();
    let error = file.write(1, b"x").unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
    assert!(error.to_string().contains("not a fencing token"), "{error}");
}
