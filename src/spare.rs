//! Lists kept empty between two uses for their room. A list allocated and
//! freed per batch or per round was several of a lock's allocations
//! (docs/benchmarks.md, "Less work per lock"); those kept now (a node's
//! batch lists, a connection's request and replies, a thread's round
//! slots) follow one rule, [`keep`].

/// Keeps `list`, emptied, in `kept`'s place when it has more room than
/// `kept` and no more than `bound`; otherwise drops it. More room: a
/// small list handed back by a nested use never takes the place of a
/// larger one (nor an empty one, without room, that of any). The bound:
/// a list that grew for one long burst is let go, not held for its
/// owner's life.
pub(crate) fn keep<T>(kept: &mut Vec<T>, mut list: Vec<T>, bound: usize) {
    list.clear();
    if list.capacity() <= bound && list.capacity() > kept.capacity() {
        *kept = list;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_larger_room_within_its_bound() {
        let mut kept: Vec<u8> = Vec::new();
        keep(&mut kept, Vec::with_capacity(8), 16);
        assert_eq!(kept.capacity(), 8);
        // Less room: the kept list stays.
        keep(&mut kept, Vec::with_capacity(4), 16);
        assert_eq!(kept.capacity(), 8);
        // Past the bound: dropped, the kept list stays.
        keep(&mut kept, Vec::with_capacity(32), 16);
        assert_eq!(kept.capacity(), 8);
        // A list handed back is emptied.
        let mut full = Vec::with_capacity(12);
        full.extend_from_slice(b"abc");
        keep(&mut kept, full, 16);
        assert!(kept.is_empty());
        assert_eq!(kept.capacity(), 12);
        // A list without room is not kept, even in place of none.
        let mut none: Vec<u8> = Vec::new();
        keep(&mut none, Vec::new(), 16);
        assert_eq!(none.capacity(), 0);
    }
}
