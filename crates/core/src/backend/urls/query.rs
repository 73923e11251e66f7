//! A URL's query: its `key=value` pairs, decoded once.

use crate::{Error, Result};

use super::escapes::percent_decode;

/// One `key=value` pair of a query: its key and value decoded, and the
/// pair as written, for handing on to a driver untouched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryPair<'a> {
    key: String,
    value: String,
    written: &'a str,
}

impl<'a> QueryPair<'a> {
    /// The key, decoded.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The value, decoded.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The pair as written in the URL.
    pub fn as_written(&self) -> &'a str {
        self.written
    }

    /// The key as written in the URL, before decoding.
    pub fn key_as_written(&self) -> &'a str {
        self.written
            .split_once('=')
            .map_or(self.written, |(key, _)| key)
    }
}

/// A URL's query (the text after `?`, before any `#`), read once: every
/// pair's key and value %-decoded, with `+` kept as a `+`, in the order
/// written. See [the module docs](crate::backend#reading-urls)
/// for the rules, and why.
///
/// A backend takes its own options out with [`take`](Self::take), then
/// refuses what is left with [`refuse_rest`](Self::refuse_rest), or hands
/// it to its driver as written with [`to_query_string`](Self::to_query_string).
///
/// ```
/// use distlock_core::backend::Query;
///
/// let mut query = Query::parse("prefix=app%2Fa+b&mode=quorum")?;
/// assert_eq!(query.take("prefix")?.as_deref(), Some("app/a+b"));
/// assert_eq!(query.to_query_string(), "mode=quorum");
/// let error = query.refuse_rest("this backend takes prefix").unwrap_err();
/// assert!(error.to_string().contains("unknown option `mode`"));
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query<'a> {
    pairs: Vec<QueryPair<'a>>,
}

impl<'a> Query<'a> {
    /// Reads `query`. Empty pairs (`a=1&&b=2`, a trailing `&`) are skipped.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the option when a pair has no `=`
    /// or no key, or its key or value has a malformed %-escape, is not
    /// UTF-8 once decoded, or holds a NUL (`%00`). The message never shows
    /// the value, which may be a secret.
    pub fn parse(query: &'a str) -> Result<Self> {
        let pairs = split_pairs(query)
            .filter(|(written, _, _)| !written.is_empty())
            .map(|(written, key, value)| decode_pair(written, key, value))
            .collect::<Result<_>>()?;
        Ok(Self { pairs })
    }

    /// The pairs not taken yet, in the order written.
    pub fn pairs(&self) -> &[QueryPair<'a>] {
        &self.pairs
    }

    /// Whether every pair has been taken.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Takes the option `key` out of the query and returns its value, or
    /// `None` when the query does not hold it. Keys match exactly.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming `key` when it is given more than
    /// once: which one was meant cannot be told.
    pub fn take(&mut self, key: &str) -> Result<Option<String>> {
        self.take_where(key, |written| written == key)
    }

    /// As [`take`](Self::take), with keys matched ignoring ASCII case, for
    /// URLs whose keys are case-insensitive (MongoDB's).
    ///
    /// # Errors
    /// As [`take`](Self::take), for `key` in any case.
    pub fn take_ignoring_case(&mut self, key: &str) -> Result<Option<String>> {
        self.take_where(key, |written| written.eq_ignore_ascii_case(key))
    }

    /// Takes the on/off option `key` out of the query: `true` or `false`,
    /// or `None` when the query does not hold it.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming `key` when it is given more than
    /// once, or with a value other than `true` or `false`.
    pub fn take_flag(&mut self, key: &str) -> Result<Option<bool>> {
        match self.take(key)?.as_deref() {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(_) => Err(Error::config(
                key,
                format!("`{key}` takes `true` or `false`, as in `{key}=true`"),
            )),
        }
    }

    fn take_where(&mut self, key: &str, matches: impl Fn(&str) -> bool) -> Result<Option<String>> {
        let mut taken = None;
        let mut repeated = false;
        self.pairs.retain_mut(|pair| {
            if !matches(&pair.key) {
                return true;
            }
            repeated |= taken.is_some();
            taken = Some(std::mem::take(&mut pair.value));
            false
        });
        if repeated {
            return Err(given_twice(key));
        }
        Ok(taken)
    }

    /// Refuses any pair left, naming its key; `takes` says what the URL
    /// takes instead, as in "an etcd URL takes prefix and ca".
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first pair left.
    pub fn refuse_rest(&self, takes: &str) -> Result<()> {
        match self.pairs.first() {
            None => Ok(()),
            Some(pair) => Err(Error::config(
                pair.key.as_str(),
                format!("unknown option `{}`; {takes}", pair.key),
            )),
        }
    }

    /// Refuses a key given more than once (ignoring ASCII case), unless it
    /// is one of `may_repeat`: for the options a backend hands on to its
    /// driver, which would otherwise keep one of them silently.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first repeated key.
    pub fn refuse_repeats(&self, may_repeat: &[&str]) -> Result<()> {
        for (at, pair) in self.pairs.iter().enumerate() {
            let same = |other: &QueryPair<'_>| other.key.eq_ignore_ascii_case(&pair.key);
            let allowed = may_repeat
                .iter()
                .any(|key| key.eq_ignore_ascii_case(&pair.key));
            if !allowed && self.pairs[..at].iter().any(same) {
                return Err(given_twice(&pair.key));
            }
        }
        Ok(())
    }

    /// The pairs left, as written, joined by `&`: the query a driver is
    /// handed once distlock's own options are taken out.
    pub fn to_query_string(&self) -> String {
        let written: Vec<&str> = self.pairs.iter().map(QueryPair::as_written).collect();
        written.join("&")
    }
}

/// Each `&`-separated piece of `query` as written (empty ones included),
/// with its key and its value (`None` without `=`), none decoded: what the
/// reader and redaction both start from.
pub(crate) fn split_pairs(query: &str) -> impl Iterator<Item = (&str, &str, Option<&str>)> {
    query
        .split('&')
        .map(|written| match written.split_once('=') {
            Some((key, value)) => (written, key, Some(value)),
            None => (written, written, None),
        })
}

fn decode_pair<'a>(written: &'a str, key: &str, value: Option<&str>) -> Result<QueryPair<'a>> {
    if key.is_empty() {
        return Err(Error::config(
            "query",
            "an option with no name before its `=`; write key=value",
        ));
    }
    let key = percent_decode(key)
        .map_err(|bad| Error::config(key, format!("the option's name does not decode: {bad}")))?;
    let Some(value) = value else {
        return Err(Error::config(
            key.as_str(),
            format!("the option `{key}` has no `=`; write {key}=VALUE"),
        ));
    };
    let value = percent_decode(value)
        .map_err(|bad| Error::config(key.as_str(), format!("its value does not decode: {bad}")))?;
    // libpq refuses `%00` too: drivers and file systems take C strings.
    if key.contains('\0') || value.contains('\0') {
        return Err(Error::config(
            key.as_str(),
            "a NUL (%00) is not allowed in an option",
        ));
    }
    Ok(QueryPair {
        key,
        value,
        written,
    })
}

fn given_twice(key: &str) -> Error {
    Error::config(
        key,
        format!("`{key}` is given more than once; give it once"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(result: Result<impl std::fmt::Debug>) -> String {
        match result {
            Err(Error::InvalidConfig { field, .. }) => field,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    fn values(query: &str) -> Vec<(String, String)> {
        Query::parse(query)
            .unwrap()
            .pairs()
            .iter()
            .map(|pair| (pair.key().to_owned(), pair.value().to_owned()))
            .collect()
    }

    #[test]
    fn a_flag_is_true_or_false_and_nothing_else() {
        let mut query = Query::parse("fair=true&quick=false&odd=yes").unwrap();
        assert_eq!(query.take_flag("fair").unwrap(), Some(true));
        assert_eq!(query.take_flag("quick").unwrap(), Some(false));
        assert_eq!(query.take_flag("absent").unwrap(), None);
        let error = query.take_flag("odd").unwrap_err();
        assert!(error.to_string().contains("`odd=true`"), "{error}");
        assert_eq!(
            field_of(
                Query::parse("fair=true&fair=true")
                    .unwrap()
                    .take_flag("fair")
            ),
            "fair"
        );
    }

    #[test]
    fn a_plus_is_a_plus_and_escapes_decode() {
        let pairs = values("a=x+y&b=x%2By&c=x%20y&d=&e%5F=%3D%26");
        let pairs: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("a", "x+y"),
                ("b", "x+y"),
                ("c", "x y"),
                ("d", ""),
                ("e_", "=&")
            ]
        );
    }

    #[test]
    fn empty_pairs_are_skipped() {
        assert!(Query::parse("").unwrap().is_empty());
        assert!(Query::parse("&&").unwrap().is_empty());
        assert_eq!(values("&a=1&&b=2&").len(), 2);
    }

    #[test]
    fn malformed_pairs_are_refused_by_name_without_their_value() {
        for (query, field) in [
            ("prefix=%zz", "prefix"),
            ("prefix=ok%2", "prefix"),
            ("prefix=%FF", "prefix"),
            ("prefix=a%00b", "prefix"),
            ("pre%zzfix=a", "pre%zzfix"),
            ("prefix", "prefix"),
            ("=s3cret", "query"),
        ] {
            let error = Query::parse(query).unwrap_err();
            let shown = error.to_string();
            assert_eq!(field_of(Err::<(), _>(error)), field, "{query}");
            if let Some((_, value)) = query.split_once('=')
                && !value.is_empty()
                && value != "a"
            {
                assert!(!shown.contains(value), "{shown}");
            }
        }
    }

    #[test]
    fn a_repeated_key_is_refused_by_whoever_reads_it() {
        let mut query = Query::parse("prefix=a&mode=x&prefix=b").unwrap();
        assert_eq!(field_of(query.take("prefix")), "prefix");
        let query = Query::parse("tag=a&Tag=b&w=1").unwrap();
        assert_eq!(field_of(query.refuse_repeats(&[])), "Tag");
        assert!(query.refuse_repeats(&["TAG"]).is_ok());
    }

    #[test]
    fn taking_leaves_the_rest_as_written() {
        let mut query = Query::parse("lease=10s&replicaSet=rs%30&Collection=l+x&w=1").unwrap();
        assert_eq!(query.take("lease").unwrap().as_deref(), Some("10s"));
        assert_eq!(query.take("collection").unwrap(), None);
        assert_eq!(
            query.take_ignoring_case("collection").unwrap().as_deref(),
            Some("l+x")
        );
        assert_eq!(query.to_query_string(), "replicaSet=rs%30&w=1");
        assert_eq!(query.pairs()[0].key_as_written(), "replicaSet");
        assert_eq!(query.pairs()[0].value(), "rs0");
        let error = query.refuse_rest("takes nothing").unwrap_err().to_string();
        assert!(error.contains("unknown option `replicaSet`"), "{error}");
    }

    #[test]
    fn no_input_panics() {
        for query in [
            "=",
            "==",
            "&=&",
            "%",
            "a=%",
            "a==b",
            "%C3%A9=%E2%82%AC",
            "a=b=c",
        ] {
            let _ = Query::parse(query);
        }
        assert_eq!(values("a==b"), [("a".to_owned(), "=b".to_owned())]);
    }
}
