//! The names nearest to a mistyped one, for the errors that suggest what was meant (an unknown
//! tool a model called, a tool name a caller gave): the one place this is worked out.

/// Up to three of `candidates` nearest to `name` by edit distance, the nearest first (ties in
/// the order of the names).
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut ranked: Vec<(usize, &str)> =
        candidates.into_iter().map(|candidate| (edit_distance(name, candidate), candidate)).collect();
    ranked.sort();
    ranked.into_iter().take(3).map(|(_, candidate)| candidate).collect()
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("get_task", "get_task"), 0);
        assert_eq!(edit_distance("get_tsk", "get_task"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn the_nearest_three_come_first() {
        let names = ["get_task", "list_tasks", "send_message", "get_member"];
        let near = closest("get_taks", names);
        assert_eq!(near.len(), 3);
        assert_eq!(near[0], "get_task");
        assert!(!near.contains(&"send_message"), "{near:?}");
        assert_eq!(closest("x", ["b", "a"]), ["a", "b"]);
        assert!(closest("x", []).is_empty());
    }
}
