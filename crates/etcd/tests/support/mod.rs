//! What the cluster tests share: the members of the test cluster, and a
//! fenced counter that holders in several processes update; and a member
//! of a test's own, for the authentication and TLS tests.

pub(crate) mod churn;
pub(crate) mod fenced;
pub(crate) mod lone_member;
pub(crate) mod members;
pub(crate) mod netns;
pub(crate) mod own_cluster;
