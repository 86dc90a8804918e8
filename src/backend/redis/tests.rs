//! Unit tests of the Redis backend that need no server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::backend::redis::*;

#[test]
fn describe_never_shows_the_password() {
    let cases = [
        ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379/0"),
        ("redis://127.0.0.1", "redis://127.0.0.1:6379/0"),
        (
            "redis://:s3cret@127.0.0.1:7000/2",
            "redis://:***@127.0.0.1:7000/2",
        ),
        (
            "redis://bob:s3cret@localhost:7000",
            "redis://bob:***@localhost:7000/0",
        ),
        ("redis://bob@localhost:7000", "redis://bob@localhost:7000/0"),
        ("redis://[::1]:7000", "redis://[::1]:7000/0"),
    ];
    for (url, want) in cases {
        let b = RedisBackend::open(url, Duration::from_millis(50)).unwrap();
        assert_eq!(b.describe(), want);
        assert_eq!(b.url_redacted(), want);
        assert!(!format!("{b:?}").contains("s3cret"));
    }
}

#[test]
fn malformed_urls_are_config_errors_without_the_password() {
    for url in [
        "redis://user:s3cret@host:notaport",
        "http://user:s3cret@host:6379",
        "redis://:s3cret@0.0.0.0:6379",
        "redis://:s3cret@host:6379/notadb",
        "",
    ] {
        let err = RedisBackend::open(url, Duration::from_millis(50)).unwrap_err();
        assert_eq!(err.kind(), BackendErrorKind::Config, "{url}: {err}");
        assert!(!err.to_string().contains("s3cret"), "{err}");
        assert!(!format!("{err:?}").contains("s3cret"), "{err:?}");
    }
}

#[test]
fn zero_timeout_is_a_config_error() {
    let err = RedisBackend::open("redis://127.0.0.1", Duration::ZERO).unwrap_err();
    assert_eq!(err.kind(), BackendErrorKind::Config);
}

#[cfg(not(feature = "tls"))]
#[test]
fn tls_url_without_the_feature_says_so() {
    let err =
        RedisBackend::open("rediss://:s3cret@127.0.0.1", Duration::from_millis(50)).unwrap_err();
    assert_eq!(err.kind(), BackendErrorKind::Config);
    assert!(err.to_string().contains("`tls` feature"), "{err}");
    assert!(!err.to_string().contains("s3cret"));
}

#[cfg(feature = "tls")]
#[test]
fn tls_url_with_the_feature_opens() {
    let b =
        RedisBackend::open("rediss://:s3cret@127.0.0.1:6380", Duration::from_millis(50)).unwrap();
    assert_eq!(b.describe(), "rediss://:***@127.0.0.1:6380/0");
}

#[test]
fn backend_is_send_sync_clone() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    check::<RedisBackend>();
}
