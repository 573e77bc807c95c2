//! Redundancy sets: which processes protect each other. A set never holds two processes of
//! the same failure group (by default the node), so losing one group costs a set at most one
//! member.
//!
//! The construction is deterministic (every rank computes the same sets from the same
//! input): processes are ranked within their group; *level* `l` holds the `l`-th process of
//! every group that has one. A level with at least `set_size` processes is cut into
//! `floor(len / set_size)` sets of nearly equal size (each at least `set_size`); the first
//! level, when smaller, forms one set as large as it can be. The processes of a later, short
//! level (uneven processes per group) join the smallest existing set that has no process of
//! their group, and form a set of their own only when none does.

/// Sets over processes `0..groups.len()`, where `groups[r]` is the failure group of process
/// `r`; each set lists its processes in increasing order.
pub fn form_sets(groups: &[usize], set_size: usize) -> Vec<Vec<usize>> {
    let set_size = set_size.max(2);
    let ngroups = groups.iter().max().map_or(0, |g| g + 1);
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); ngroups];
    for (r, &g) in groups.iter().enumerate() {
        members[g].push(r);
    }
    let depth = members.iter().map(Vec::len).max().unwrap_or(0);
    let mut sets: Vec<Vec<usize>> = Vec::new();
    for l in 0..depth {
        let level: Vec<usize> = members.iter().filter_map(|m| m.get(l).copied()).collect();
        if level.len() >= set_size || l == 0 {
            let nsets = (level.len() / set_size).max(1);
            let (base, extra) = (level.len() / nsets, level.len() % nsets);
            let mut it = level.into_iter();
            for s in 0..nsets {
                sets.push(it.by_ref().take(base + usize::from(s < extra)).collect());
            }
        } else {
            let mut left = Vec::new();
            for r in level {
                let home = (0..sets.len())
                    .filter(|&s| sets[s].iter().all(|&x| groups[x] != groups[r]))
                    .min_by_key(|&s| (sets[s].len(), s));
                match home {
                    Some(s) => sets[s].push(r),
                    None => left.push(r),
                }
            }
            if !left.is_empty() {
                sets.push(left);
            }
        }
    }
    for s in &mut sets {
        s.sort_unstable();
    }
    sets
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(groups: &[usize], set_size: usize) -> Vec<Vec<usize>> {
        let sets = form_sets(groups, set_size);
        let mut seen = vec![false; groups.len()];
        for s in &sets {
            for (i, &a) in s.iter().enumerate() {
                assert!(!seen[a], "{a} in two sets");
                seen[a] = true;
                for &b in &s[i + 1..] {
                    assert_ne!(groups[a], groups[b], "{a} and {b} share a failure group in {s:?}");
                }
            }
        }
        assert!(seen.iter().all(|&x| x), "every process is in a set");
        assert_eq!(sets, form_sets(groups, set_size), "deterministic");
        sets
    }

    #[test]
    fn even_nodes() {
        // 4 nodes x 2 processes, sets of 4: the two levels.
        let g = [0, 0, 1, 1, 2, 2, 3, 3];
        assert_eq!(check(&g, 4), vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]]);
        // Sets of 2: each level cut in two.
        assert_eq!(check(&g, 2), vec![vec![0, 2], vec![4, 6], vec![1, 3], vec![5, 7]]);
        // 8 nodes, sets of 3: 2 sets of 4 and 3 (at least 3 each).
        let g: Vec<usize> = (0..8).collect();
        let sets = check(&g, 3);
        assert_eq!(sets.iter().map(Vec::len).collect::<Vec<_>>(), vec![4, 4]);
    }

    #[test]
    fn too_few_groups_gives_the_largest_possible_sets() {
        let g = [0, 0, 1, 1];
        assert_eq!(check(&g, 8), vec![vec![0, 2], vec![1, 3]]);
        // One node: no set can span failure groups.
        let g = [0, 0, 0, 0];
        assert!(check(&g, 4).iter().all(|s| s.len() == 1));
    }

    #[test]
    fn uneven_processes_per_group() {
        // Node 0 has 3 processes, nodes 1 and 2 have 1: the extra ones join sets without
        // their node, or stand alone when there is none.
        let g = [0, 0, 0, 1, 2];
        let sets = check(&g, 2);
        assert_eq!(sets, vec![vec![0, 3, 4], vec![1], vec![2]]);
        let g = [0, 1, 1, 2, 2, 3];
        let sets = check(&g, 2);
        assert_eq!(sets, vec![vec![0, 1], vec![3, 5], vec![2, 4]]);
    }
}
