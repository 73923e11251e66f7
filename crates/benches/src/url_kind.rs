//! What a backend URL names: its kind, and the modes that make a target of
//! their own (PostgreSQL's advisory mode, MongoDB's fair mode), read as the
//! backends themselves read the URL.

/// The kind of backend `url` names, as [`crate::target::Target::kind`] says it.
pub(crate) fn kind_of_url(url: &str) -> &'static str {
    if url.starts_with("file:") {
        "file"
    } else if url.starts_with("mongodb://") || url.starts_with("mongodb+srv://") {
        "MongoDB"
    } else if url.starts_with("memcache://") || url.starts_with("memcached://") {
        "memcached"
    } else if is_etcd_url(url) {
        "etcd"
    } else if is_postgres_url(url) {
        "PostgreSQL"
    } else if is_redis_url(url) {
        "Redis"
    } else if crate::objectstore::is_objectstore_url(url) {
        OBJECT_STORE
    } else {
        "other"
    }
}

/// What the report calls the object-storage backend (`s3://`, `gs://`,
/// `az://` URLs), and what `--only` takes for it: the name of its crate's
/// feature and of its page in docs/.
pub(crate) const OBJECT_STORE: &str = "objectstore";

/// Whether `url` names Redis (`redis://`, or `rediss://` for TLS).
pub(crate) fn is_redis_url(url: &str) -> bool {
    url.starts_with("redis://") || url.starts_with("rediss://")
}

/// Whether `url` names etcd (`etcd://`, or `etcds://` for TLS).
pub(crate) fn is_etcd_url(url: &str) -> bool {
    url.starts_with("etcd://") || url.starts_with("etcds://")
}

/// Whether `url` names PostgreSQL (`postgres://` or `postgresql://`).
pub(crate) fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// What the report calls distlock's PostgreSQL advisory mode, a target of
/// its own beside lease mode (the default, called plain `PostgreSQL`).
pub(crate) const ADVISORY_MODE: &str = "PostgreSQL, advisory mode";

/// Whether `url` opens distlock's PostgreSQL backend in advisory mode
/// (`?mode=advisory`), as the backend itself reads the URL.
pub(crate) fn is_advisory_mode(url: &str) -> bool {
    is_postgres_url(url)
        && distlock::postgres::PostgresConfig::parse(url)
            .is_ok_and(|config| config.mode == distlock::postgres::Mode::Advisory)
}

/// Whether `url` opens distlock's MongoDB backend in fair mode
/// (`fair=true`, as the backend reads it).
pub(crate) fn is_fair_mongo_url(url: &str) -> bool {
    kind_of_url(url) == "MongoDB"
        && url
            .split_once('?')
            .is_some_and(|(_, query)| query.split('&').any(|pair| pair == "fair=true"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fair_mode_on_mongodb_is_told_from_the_url() {
        assert!(is_fair_mongo_url("mongodb://h/db?collection=c&fair=true"));
        assert!(!is_fair_mongo_url("mongodb://h/db?fair=false"));
        assert!(!is_fair_mongo_url("postgres://h/db?fair=true"));
    }

    #[test]
    fn every_cloud_of_the_object_store_is_one_kind() {
        for url in [
            "az://c/p?endpoint=http://127.0.0.1:1/a",
            "s3://b",
            "GS://b/p",
        ] {
            assert_eq!(kind_of_url(url), OBJECT_STORE, "{url}");
        }
        assert_eq!(kind_of_url("azure://c"), "other");
    }

    #[test]
    fn advisory_mode_is_told_from_the_url() {
        let url = "postgres://u:p@127.0.0.1:5432/db";
        assert!(!is_advisory_mode(url));
        assert!(is_advisory_mode(&format!("{url}?mode=advisory")));
        assert!(is_advisory_mode(&format!("{url}?table=t&mode=advisory")));
        assert!(!is_advisory_mode(&format!("{url}?mode=lease")));
        assert!(!is_advisory_mode("memcache://127.0.0.1:1?mode=advisory"));
        // Both modes are PostgreSQL, so `--only PostgreSQL` keeps both.
        assert_eq!(kind_of_url(&format!("{url}?mode=advisory")), "PostgreSQL");
        assert!(!distlock::redact(&format!("{url}?mode=advisory")).contains("u:p"));
    }
}
