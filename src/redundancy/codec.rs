//! The pure erasure codec behind XOR and RS: how a set of `n` ranks, tolerating `m` losses,
//! lays out data and parity, and which linear combination of surviving shards rebuilds each
//! lost one. No I/O and no MPI: the parallel schedules and the serial rebuild apply these
//! coefficients piece by piece.
//!
//! Each rank's data (its files concatenated, zero padded) is cut into `k = n - m` chunks.
//! There are `n` stripes; stripe `s` holds one chunk of every rank: the parity rows `0..m` on
//! ranks `s, s+1, ..., s+m-1` and the data positions `0..k` on ranks `s+m, ..., s+n-1` (all
//! modulo `n`). So every rank stores `m` parity chunks, one redundancy file of `m * chunk`
//! bytes. Parity row `j` of a stripe is `sum_p C[j][p] * data_p` with `C` a Cauchy matrix whose
//! columns are scaled so that row 0 is all ones: with `m = 1` this is SCR's XOR scheme exactly
//! (rank `i`'s parity is the XOR of the other ranks' chunks, chunk `(i - r - 1) mod n` of rank
//! `r`), and any `m` lost shards of a stripe can be solved for (every square submatrix of a
//! scaled Cauchy matrix is invertible).

use super::gf::{self, Matrix};
use super::RedError;

/// One shard of a stripe as a rank holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shard {
    /// Data chunk `p` of the holder (also its position in the stripe).
    Data(usize),
    /// Parity row `j` (stored at row `j` of the holder's redundancy file).
    Parity(usize),
}

/// A code over a set of `n` ranks tolerating `m` losses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Code {
    pub n: usize,
    pub m: usize,
}

/// How to rebuild the lost ranks of a set: for each stripe and lost rank, the surviving
/// shards to combine and their coefficients.
#[derive(Debug, Clone)]
pub struct Recovery {
    pub lost: Vec<usize>,
    /// `terms[s][l]`: (survivor rank, coefficient) pairs giving lost rank `lost[l]`'s shard
    /// of stripe `s`.
    pub terms: Vec<Vec<Vec<(usize, u8)>>>,
}

impl Recovery {
    /// The coefficient survivor `rank` applies to its shard of stripe `s` for lost index `l`.
    pub fn coef(&self, s: usize, l: usize, rank: usize) -> u8 {
        self.terms[s][l].iter().find(|(r, _)| *r == rank).map(|(_, c)| *c).unwrap_or(0)
    }
}

impl Code {
    /// A code for `n` ranks and `m` tolerated losses (`1 <= m < n`, `n <= 255`).
    pub fn new(n: usize, m: usize) -> Result<Code, RedError> {
        if m == 0 || m >= n {
            return Err(RedError::Shape { n, m });
        }
        if n > 255 {
            return Err(RedError::TooLarge { n });
        }
        Ok(Code { n, m })
    }

    /// Data chunks per rank.
    pub fn k(&self) -> usize {
        self.n - self.m
    }

    /// Chunk size for a set whose largest rank holds `max_bytes`.
    pub fn chunk_size(&self, max_bytes: u64) -> u64 {
        max_bytes.div_ceil(self.k() as u64)
    }

    /// What rank `rank` holds of stripe `s`.
    pub fn shard_of(&self, rank: usize, s: usize) -> Shard {
        let q = (rank + self.n - s) % self.n;
        if q < self.m {
            Shard::Parity(q)
        } else {
            Shard::Data(q - self.m)
        }
    }

    /// The stripe that data chunk `p` of `rank` belongs to (the tests check the layout with it).
    #[cfg(test)]
    pub fn stripe_of_data(&self, rank: usize, p: usize) -> usize {
        (rank + 2 * self.n - self.m - p) % self.n
    }

    /// The stripe whose parity row `j` `rank` stores (used by the in-memory reference [`Code::encode`]).
    #[cfg(test)]
    pub fn stripe_of_parity(&self, rank: usize, j: usize) -> usize {
        (rank + self.n - j) % self.n
    }

    /// Coefficient of data position `p` in parity row `j`.
    pub fn coef(&self, j: usize, p: usize) -> u8 {
        let cauchy = |j: usize, p: usize| gf::inv((j as u8) ^ ((self.m + p) as u8));
        gf::mul(cauchy(j, p), gf::inv(cauchy(0, p)))
    }

    /// Row of the generator matrix for the shard at stripe position `q` (parity rows first,
    /// then data), over the `k` data positions.
    fn generator_row(&self, q: usize) -> Vec<u8> {
        if q < self.m {
            (0..self.k()).map(|p| self.coef(q, p)).collect()
        } else {
            (0..self.k()).map(|p| u8::from(p == q - self.m)).collect()
        }
    }

    /// Coefficients that rebuild the `lost` ranks (distinct, at most `m`).
    pub fn recovery(&self, lost: &[usize]) -> Result<Recovery, RedError> {
        let mut lost: Vec<usize> = lost.to_vec();
        lost.sort_unstable();
        lost.dedup();
        if lost.len() > self.m {
            return Err(RedError::TooManyLost { lost: lost.len(), m: self.m });
        }
        if let Some(&r) = lost.iter().find(|&&r| r >= self.n) {
            return Err(RedError::NotInSet { rank: r, n: self.n });
        }
        let k = self.k();
        let mut terms = Vec::with_capacity(self.n);
        for s in 0..self.n {
            // Survivors by stripe position, data first: k of them determine the stripe.
            let mut pos: Vec<usize> = (0..self.n).filter(|q| !lost.contains(&((s + q) % self.n))).collect();
            pos.sort_by_key(|&q| (q < self.m, q));
            pos.truncate(k);
            let gt: Matrix = pos.iter().map(|&q| self.generator_row(q)).collect();
            let gi = gf::invert(&gt).ok_or(RedError::Singular)?;
            let mut per_lost = Vec::with_capacity(lost.len());
            for &l in &lost {
                let q = (l + self.n - s) % self.n;
                let row = self.generator_row(q);
                // row * gi: the weight of each chosen survivor.
                let combo: Vec<(usize, u8)> = (0..k)
                    .map(|t| {
                        let c = (0..k).fold(0u8, |acc, x| acc ^ gf::mul(row[x], gi[x][t]));
                        ((s + pos[t]) % self.n, c)
                    })
                    .filter(|(_, c)| *c != 0)
                    .collect();
                per_lost.push(combo);
            }
            terms.push(per_lost);
        }
        Ok(Recovery { lost, terms })
    }

    /// Encode a whole set in memory: `data[r]` is rank r's padded data (`k * chunk` bytes);
    /// returns each rank's redundancy (`m * chunk` bytes). The reference the tests compare the
    /// streaming schedules with (the library itself encodes piece by piece).
    #[cfg(test)]
    pub fn encode(&self, data: &[Vec<u8>], chunk: usize) -> Vec<Vec<u8>> {
        (0..self.n)
            .map(|i| {
                let mut out = vec![0u8; self.m * chunk];
                for j in 0..self.m {
                    let s = self.stripe_of_parity(i, j);
                    for p in 0..self.k() {
                        let r = (s + self.m + p) % self.n;
                        gf::mul_xor(
                            self.coef(j, p),
                            &data[r][p * chunk..(p + 1) * chunk],
                            &mut out[j * chunk..][..chunk],
                        );
                    }
                }
                out
            })
            .collect()
    }

    /// Rebuild lost ranks in memory from `shards[r] = Some((data, parity))` of the survivors;
    /// returns (data, parity) for each rank of `rec.lost`. The tests' reference, as [`Code::encode`].
    #[cfg(test)]
    pub fn rebuild(
        &self,
        rec: &Recovery,
        shards: &[Option<(Vec<u8>, Vec<u8>)>],
        chunk: usize,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let piece = |r: usize, s: usize| -> &[u8] {
            let (d, p) = shards[r].as_ref().expect("a survivor");
            match self.shard_of(r, s) {
                Shard::Data(x) => &d[x * chunk..(x + 1) * chunk],
                Shard::Parity(j) => &p[j * chunk..(j + 1) * chunk],
            }
        };
        rec.lost
            .iter()
            .enumerate()
            .map(|(l, &lr)| {
                let mut data = vec![0u8; self.k() * chunk];
                let mut parity = vec![0u8; self.m * chunk];
                for s in 0..self.n {
                    let out = match self.shard_of(lr, s) {
                        Shard::Data(x) => &mut data[x * chunk..(x + 1) * chunk],
                        Shard::Parity(j) => &mut parity[j * chunk..(j + 1) * chunk],
                    };
                    for &(r, c) in &rec.terms[s][l] {
                        gf::mul_xor(c, piece(r, s), out);
                    }
                }
                (data, parity)
            })
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)] // matrix-style indexing reads best in these tests
mod tests {
    use super::*;
    use crate::redundancy::gf::tests::slow_mul;

    /// A tiny deterministic generator (no extra dependency).
    fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// The oracle: every parity byte computed one multiplication at a time from the layout
    /// written out longhand.
    fn naive_parity(n: usize, m: usize, data: &[Vec<u8>], chunk: usize) -> Vec<Vec<u8>> {
        let code = Code { n, m };
        let mut out = vec![vec![0u8; m * chunk]; n];
        for s in 0..n {
            for j in 0..m {
                let holder = (s + j) % n;
                for p in 0..n - m {
                    let r = (s + m + p) % n;
                    for b in 0..chunk {
                        out[holder][j * chunk + b] ^= slow_mul(code.coef(j, p), data[r][p * chunk + b]);
                    }
                }
            }
        }
        out
    }

    fn subsets(n: usize, max: usize) -> Vec<Vec<usize>> {
        (1u32..(1 << n))
            .map(|b| (0..n).filter(|i| b & (1 << i) != 0).collect::<Vec<_>>())
            .filter(|v| v.len() <= max)
            .collect()
    }

    #[test]
    fn xor_is_plain_xor_of_the_other_ranks() {
        let code = Code::new(4, 1).unwrap();
        for p in 0..3 {
            assert_eq!(code.coef(0, p), 1);
        }
        let chunk = 5;
        let data: Vec<Vec<u8>> = (0..4).map(|r| random_bytes(r, 3 * chunk)).collect();
        let par = code.encode(&data, chunk);
        for i in 0..4 {
            let mut x = vec![0u8; chunk];
            for r in (0..4).filter(|&r| r != i) {
                let c = (r + 4 - i - 1) % 4; // chunk c of rank r goes to the parity of rank r - 1 - c
                gf::xor_into(&mut x, &data[r][c * chunk..(c + 1) * chunk]);
            }
            assert_eq!(par[i], x, "parity of rank {i}");
        }
    }

    #[test]
    fn every_tolerated_erasure_pattern_rebuilds_exactly() {
        for (n, m) in [(2, 1), (3, 1), (4, 1), (5, 1), (4, 2), (5, 2), (6, 2), (6, 3), (7, 3), (8, 2)] {
            let code = Code::new(n, m).unwrap();
            let chunk = 37;
            let data: Vec<Vec<u8>> =
                (0..n).map(|r| random_bytes((n * 100 + m * 10 + r) as u64, code.k() * chunk)).collect();
            let parity = code.encode(&data, chunk);
            assert_eq!(parity, naive_parity(n, m, &data, chunk), "n={n} m={m}");
            for lost in subsets(n, m) {
                let rec = code.recovery(&lost).unwrap();
                let shards: Vec<Option<(Vec<u8>, Vec<u8>)>> =
                    (0..n).map(|r| (!lost.contains(&r)).then(|| (data[r].clone(), parity[r].clone()))).collect();
                for (l, (d, p)) in code.rebuild(&rec, &shards, chunk).into_iter().enumerate() {
                    let r = rec.lost[l];
                    assert_eq!(d, data[r], "n={n} m={m} lost={lost:?}: data of {r}");
                    assert_eq!(p, parity[r], "n={n} m={m} lost={lost:?}: parity of {r}");
                }
            }
            let too_many: Vec<usize> = (0..=m).collect();
            assert!(code.recovery(&too_many).unwrap_err().to_string().contains("tolerates"));
        }
    }

    #[test]
    fn geometry_is_consistent() {
        let code = Code::new(6, 2).unwrap();
        for r in 0..6 {
            for p in 0..4 {
                assert_eq!(code.shard_of(r, code.stripe_of_data(r, p)), Shard::Data(p));
            }
            for j in 0..2 {
                assert_eq!(code.shard_of(r, code.stripe_of_parity(r, j)), Shard::Parity(j));
            }
        }
        assert!(Code::new(3, 3).is_err());
        assert!(Code::new(3, 0).is_err());
    }
}
