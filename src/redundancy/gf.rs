//! GF(2^8) arithmetic for the erasure codes: scalar operations, the SIMD slice kernels of the
//! `reed-solomon-erasure` crate (SSSE3/AVX2 nibble tables, built with its `simd-accel`
//! feature), and Gauss-Jordan inversion of small matrices.
//!
//! The field uses the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d); the unit tests check the
//! crate's tables against a bit-by-bit multiplication.

use reed_solomon_erasure::galois_8 as g;

pub fn mul(a: u8, b: u8) -> u8 {
    g::mul(a, b)
}

/// The multiplicative inverse of a non-zero element.
pub fn inv(a: u8) -> u8 {
    assert!(a != 0, "zero has no inverse in GF(2^8)");
    g::div(1, a)
}

/// `out ^= input` (a plain loop, which the compiler turns into the widest vector XOR).
pub fn xor_into(out: &mut [u8], input: &[u8]) {
    assert_eq!(out.len(), input.len());
    for (o, i) in out.iter_mut().zip(input) {
        *o ^= *i;
    }
}

/// `out = c * input` (c = 1 is a copy), for a first contribution: no clearing beforehand.
pub fn mul_into(c: u8, input: &[u8], out: &mut [u8]) {
    match c {
        0 => out.fill(0),
        1 => out.copy_from_slice(input),
        _ => g::mul_slice(c, input, out),
    }
}

/// `out ^= c * input` (c = 1 is a plain XOR, c = 0 does nothing).
pub fn mul_xor(c: u8, input: &[u8], out: &mut [u8]) {
    match c {
        0 => {}
        1 => xor_into(out, input),
        _ => g::mul_slice_xor(c, input, out),
    }
}

/// A square matrix over GF(2^8), row-major.
pub type Matrix = Vec<Vec<u8>>;

/// The inverse of a square matrix, or `None` if it is singular.
pub fn invert(m: &Matrix) -> Option<Matrix> {
    let n = m.len();
    let mut a: Matrix = m.clone();
    let mut r: Matrix = (0..n).map(|i| (0..n).map(|j| u8::from(i == j)).collect()).collect();
    for col in 0..n {
        let pivot = (col..n).find(|&row| a[row][col] != 0)?;
        a.swap(col, pivot);
        r.swap(col, pivot);
        let f = inv(a[col][col]);
        for j in 0..n {
            a[col][j] = mul(a[col][j], f);
            r[col][j] = mul(r[col][j], f);
        }
        for row in 0..n {
            if row != col && a[row][col] != 0 {
                let f = a[row][col];
                for j in 0..n {
                    a[row][j] ^= mul(f, a[col][j]);
                    r[row][j] ^= mul(f, r[col][j]);
                }
            }
        }
    }
    Some(r)
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)] // matrix-style indexing reads best in these tests
pub(crate) mod tests {
    use super::*;

    /// Multiplication bit by bit, the oracle for the tables.
    pub(crate) fn slow_mul(mut a: u8, mut b: u8) -> u8 {
        let mut p = 0u8;
        while b != 0 {
            if b & 1 != 0 {
                p ^= a;
            }
            let carry = a & 0x80 != 0;
            a <<= 1;
            if carry {
                a ^= 0x1d;
            }
            b >>= 1;
        }
        p
    }

    #[test]
    fn tables_match_bitwise_multiplication() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), slow_mul(a, b), "{a} * {b}");
            }
            if a != 0 {
                assert_eq!(slow_mul(a, inv(a)), 1);
            }
        }
    }

    #[test]
    fn slice_kernels_match_scalar() {
        let input: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        for c in [0u8, 1, 2, 0x53, 0xff] {
            let mut out: Vec<u8> = (0..1000u32).map(|i| (i * 13) as u8).collect();
            let expect: Vec<u8> = out.iter().zip(&input).map(|(o, i)| o ^ slow_mul(c, *i)).collect();
            mul_xor(c, &input, &mut out);
            assert_eq!(out, expect, "c = {c}");
            let mut fresh = vec![0xaau8; 1000];
            mul_into(c, &input, &mut fresh);
            let expect: Vec<u8> = input.iter().map(|i| slow_mul(c, *i)).collect();
            assert_eq!(fresh, expect, "c = {c}");
        }
    }

    #[test]
    fn inversion() {
        let m: Matrix = vec![vec![1, 2, 3], vec![4, 5, 6], vec![7, 8, 10]];
        let i = invert(&m).unwrap();
        for r in 0..3 {
            for c in 0..3 {
                let v = (0..3).fold(0u8, |acc, k| acc ^ slow_mul(m[r][k], i[k][c]));
                assert_eq!(v, u8::from(r == c));
            }
        }
        assert!(invert(&vec![vec![1, 1], vec![1, 1]]).is_none());
    }
}
