//! What the cluster tests share: the members of the test cluster, and a
//! fenced counter that holders in several processes update.

pub(crate) mod fenced;
pub(crate) mod members;
pub(crate) mod netns;
pub(crate) mod own_cluster;
