//! A lease's [`Support`]: the nodes whose grants counted for its current
//! deadline, each with its forget epoch as read before the round that
//! granted was sent (see `engine::Forgets`). A node whose epoch has moved
//! since may have forgotten the lock's keys (eviction, a replica, a new
//! replication history): it no longer supports the lease.

/// The nodes whose grants a lease's deadline rests on, in node order,
/// each with the forget epoch it had before the granting round was sent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct Support {
    nodes: Box<[(usize, u64)]>,
}

impl Support {
    /// The nodes of one round that granted (`granted`, one flag per node in
    /// node order), with `epochs` (every node's, in node order) read
    /// before the round was sent. A node without an epoch counts at 0.
    pub(crate) fn of_grants(epochs: &[u64], granted: impl IntoIterator<Item = bool>) -> Self {
        let nodes = granted
            .into_iter()
            .enumerate()
            .filter(|(_, granted)| *granted)
            .map(|(node, _)| (node, epochs.get(node).copied().unwrap_or(0)))
            .collect();
        Self { nodes }
    }

    /// How many supporting nodes there are.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The supporting nodes, in node order.
    #[cfg(test)]
    pub(crate) fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
        self.nodes.iter().map(|(node, _)| *node)
    }

    /// How many supporting nodes still have their recorded epoch, given
    /// each node's epoch now (`epoch(node)`).
    pub(crate) fn holding(&self, epoch: impl Fn(usize) -> u64) -> usize {
        self.nodes
            .iter()
            .filter(|(node, seen)| epoch(*node) == *seen)
            .count()
    }

    /// The supporting nodes whose epoch has moved, in node order.
    pub(crate) fn moved(&self, epoch: impl Fn(usize) -> u64) -> Vec<usize> {
        self.nodes
            .iter()
            .filter(|(node, seen)| epoch(*node) != *seen)
            .map(|(node, _)| *node)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_support_is_the_granting_nodes_with_their_epochs_before_the_round() {
        let support = Support::of_grants(&[4, 0, 7], [true, false, true]);
        assert_eq!(support.nodes().collect::<Vec<_>>(), [0, 2]);
        let now = [4, 9, 7];
        assert_eq!(support.holding(|n| now[n]), 2);
        assert!(support.moved(|n| now[n]).is_empty());
        let later = [5, 9, 7];
        assert_eq!(support.holding(|n| later[n]), 1);
        assert_eq!(support.moved(|n| later[n]), [0]);
    }

    #[test]
    fn a_node_without_an_epoch_counts_at_zero() {
        let support = Support::of_grants(&[], [true]);
        assert_eq!(support.holding(|_| 0), 1);
        assert_eq!(support.len(), 1);
    }
}
