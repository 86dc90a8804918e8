//! A lease's [`Support`]: the nodes whose grants counted for its current
//! deadline, each with its forget epoch as read before the round that
//! granted was sent (see `engine::Forgets`). A node whose epoch has moved
//! since may have forgotten the lock's keys (eviction, a replica, a new
//! replication history): it no longer supports the lease.

/// The nodes whose grants a lease's deadline rests on, in node order,
/// each with the forget epoch it had before the granting round was sent.
///
/// Every held lock keeps one, so the usual case costs no allocation:
/// epochs move only when a node forgets, so the supporting nodes mostly
/// share one epoch, and then a bit mask of the nodes (the first 64) and
/// that epoch say it all. Otherwise each node is listed with its epoch
/// (a boxed slice cost 48 bytes of heap per lock at N=3, issue 30). Each
/// support has one form (`of_grants` picks it), so the derived equality
/// and hash are those of the nodes and epochs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Support(Form);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Form {
    /// Nodes below 64 (bit `n` is node `n`) that all had `epoch`; no node
    /// is `{ nodes: 0, epoch: 0 }`.
    Same { nodes: u64, epoch: u64 },
    /// Any other: each node with its epoch, in node order.
    Each(Box<[(usize, u64)]>),
}

impl Default for Support {
    /// No node.
    fn default() -> Self {
        Self(Form::Same { nodes: 0, epoch: 0 })
    }
}

impl Support {
    /// The nodes of one round that granted (`granted`, one flag per node in
    /// node order), with `epochs` (every node's, in node order) read
    /// before the round was sent. A node without an epoch counts at 0.
    pub(crate) fn of_grants(epochs: &[u64], granted: impl IntoIterator<Item = bool>) -> Self {
        let mut nodes = granted
            .into_iter()
            .enumerate()
            .filter(|(_, granted)| *granted)
            .map(|(node, _)| (node, epochs.get(node).copied().unwrap_or(0)));
        // The usual case, without a list: one epoch, nodes 0 to 63.
        let (mut mask, mut epoch) = (0u64, None);
        while let Some((node, seen)) = nodes.next() {
            if node >= 64 || epoch.is_some_and(|e| e != seen) {
                // The nodes so far (all of `epoch`), this one, the rest.
                let same = epoch.unwrap_or(seen);
                let mut each: Vec<(usize, u64)> = (0..64)
                    .filter(|n| mask & (1 << n) != 0)
                    .map(|n| (n, same))
                    .collect();
                each.push((node, seen));
                each.extend(nodes);
                return Self(Form::Each(each.into_boxed_slice()));
            }
            mask |= 1 << node;
            epoch = Some(seen);
        }
        Self(Form::Same {
            nodes: mask,
            epoch: epoch.unwrap_or(0),
        })
    }

    /// Each supporting node with its epoch, in node order.
    fn each(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        let (mask, epoch, listed) = match &self.0 {
            Form::Same { nodes, epoch } => (*nodes, *epoch, &[][..]),
            Form::Each(listed) => (0, 0, &listed[..]),
        };
        let mut left = mask;
        let masked = std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            let node = left.trailing_zeros() as usize;
            left &= left - 1; // that node's bit off
            Some((node, epoch))
        });
        masked.chain(listed.iter().copied())
    }

    /// How many supporting nodes there are.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.each().count()
    }

    /// The supporting nodes, in node order.
    #[cfg(test)]
    pub(crate) fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
        self.each().map(|(node, _)| node)
    }

    /// How many supporting nodes still have their recorded epoch, given
    /// each node's epoch now (`epoch(node)`).
    pub(crate) fn holding(&self, epoch: impl Fn(usize) -> u64) -> usize {
        self.each()
            .filter(|(node, seen)| epoch(*node) == *seen)
            .count()
    }

    /// The supporting nodes whose epoch has moved, in node order.
    pub(crate) fn moved(&self, epoch: impl Fn(usize) -> u64) -> Vec<usize> {
        self.each()
            .filter(|(node, seen)| epoch(*node) != *seen)
            .map(|(node, _)| node)
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
    fn nodes_with_different_epochs_or_beyond_the_mask_are_listed() {
        let mixed = Support::of_grants(&[4, 0, 7], [true, true, true]);
        assert!(matches!(mixed.0, Form::Each(_)));
        assert_eq!(mixed.nodes().collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(mixed.holding(|n| [4, 1, 7][n]), 2);
        assert_eq!(mixed.moved(|n| [4, 1, 7][n]), [1]);
        // A late divergence keeps the nodes before it, with their epoch.
        let late = Support::of_grants(&[4, 4, 4, 7, 4], [true, true, false, true, true]);
        assert!(matches!(late.0, Form::Each(_)));
        assert_eq!(late.nodes().collect::<Vec<_>>(), [0, 1, 3, 4]);
        assert_eq!(late.holding(|n| [4, 4, 0, 7, 4][n]), 4);
        assert_eq!(late.moved(|n| [5, 4, 4, 7, 4][n]), [0]);

        let mut granted = vec![false; 66];
        granted[3] = true;
        granted[63] = true;
        let edge = Support::of_grants(&[2; 66], granted.iter().copied());
        assert!(matches!(edge.0, Form::Same { .. }));
        assert_eq!(edge.nodes().collect::<Vec<_>>(), [3, 63]);
        granted[65] = true;
        let beyond = Support::of_grants(&[2; 66], granted);
        assert!(matches!(beyond.0, Form::Each(_)));
        assert_eq!(beyond.nodes().collect::<Vec<_>>(), [3, 63, 65]);
        assert_eq!(beyond.holding(|n| if n == 65 { 3 } else { 2 }), 2);
        assert_eq!(beyond.moved(|n| if n == 65 { 3 } else { 2 }), [65]);
    }

    #[test]
    fn one_support_has_one_form() {
        let none = Support::of_grants(&[5, 5], [false, false]);
        assert_eq!(none, Support::default());
        assert_eq!(none.len(), 0);
        assert_eq!(
            Support::of_grants(&[1, 1, 1], [true, false, true]),
            Support::of_grants(&[1, 9, 1], [true, false, true]),
            "the epoch of a node that did not grant does not count"
        );
        assert_ne!(
            Support::of_grants(&[1, 1], [true, true]),
            Support::of_grants(&[2, 2], [true, true])
        );
    }

    #[test]
    fn a_node_without_an_epoch_counts_at_zero() {
        let support = Support::of_grants(&[], [true]);
        assert_eq!(support.holding(|_| 0), 1);
        assert_eq!(support.len(), 1);
    }
}
