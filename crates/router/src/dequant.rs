//! Row-at-a-time dequantisation of the GGUF block formats small routers ship
//! in, so the browser build can decode each weight row straight into the
//! micro-kernel's packed panels, on every thread, without first building
//! candle's full f32 tensor and copying it twice. The legacy formats
//! (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: 32 values a block) and the k-quants a
//! `Q4_K_M` file mixes in (Q4_K, Q5_K, Q6_K: 256 values a super-block) are
//! covered. The arithmetic is the reference's (ggml's `dequantize_row_*`,
//! as candle implements it): the same f32 values to the bit, which a test
//! checks for every format.

use candle_core::quantized::GgmlDType;

/// Values per super-block of the k-quants.
const QK_K: usize = 256;

/// Values and bytes per block, for the formats this module decodes.
pub fn block_shape(dtype: GgmlDType) -> Option<(usize, usize)> {
    match dtype {
        GgmlDType::Q4_0 => Some((32, 18)),
        GgmlDType::Q4_1 => Some((32, 20)),
        GgmlDType::Q5_0 => Some((32, 22)),
        GgmlDType::Q5_1 => Some((32, 24)),
        GgmlDType::Q8_0 => Some((32, 34)),
        GgmlDType::Q4K => Some((QK_K, 144)),
        GgmlDType::Q5K => Some((QK_K, 176)),
        GgmlDType::Q6K => Some((QK_K, 210)),
        _ => None,
    }
}

/// The little-endian IEEE half at `at`, widened exactly.
fn half(bytes: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

/// A k-quant's 6-bit scale and minimum number `j` (ggml's `get_scale_min_k4`).
fn scale_min_k4(j: usize, q: &[u8]) -> (f32, f32) {
    let (d, m) =
        if j < 4 { (q[j] & 63, q[j + 4] & 63) } else { ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)) };
    (d as f32, m as f32)
}

/// Half `n` (0 or 1) of a Q6_K super-block: its 128 six-bit values (0..=63,
/// before the −32 offset), from 64 bytes of low nibbles and 32 of 2-bit
/// high parts, in ggml's order.
fn q6k_half(block: &[u8], n: usize) -> [u8; 128] {
    let (ql, qh) = (&block[64 * n..], &block[128 + 32 * n..]);
    let mut q = [0u8; 128];
    for l in 0..32 {
        q[l] = (ql[l] & 0xF) | ((qh[l] & 3) << 4);
        q[l + 32] = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
        q[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
        q[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
    }
    q
}

/// Decodes one row: `blocks` holds `out.len()` values of `dtype`.
/// Returns false for a format this module does not decode.
pub fn row(dtype: GgmlDType, blocks: &[u8], out: &mut [f32]) -> bool {
    let Some((values, size)) = block_shape(dtype) else { return false };
    debug_assert_eq!(blocks.len(), out.len() / values * size);
    for (block, ys) in blocks.chunks_exact(size).zip(out.chunks_exact_mut(values)) {
        match dtype {
            GgmlDType::Q4_0 => {
                let d = half(block, 0);
                for (j, &q) in block[2..18].iter().enumerate() {
                    ys[j] = ((q & 0x0f) as i32 - 8) as f32 * d;
                    ys[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
                }
            }
            GgmlDType::Q4_1 => {
                let (d, m) = (half(block, 0), half(block, 2));
                for (j, &q) in block[4..20].iter().enumerate() {
                    ys[j] = (q & 0x0f) as f32 * d + m;
                    ys[j + 16] = (q >> 4) as f32 * d + m;
                }
            }
            GgmlDType::Q5_0 | GgmlDType::Q5_1 => {
                // Q5_1 adds a minimum after the scale; both then hold the
                // fifth bits of the 32 values as one u32, then 16 nibble pairs.
                let (m, at) = if dtype == GgmlDType::Q5_1 { (Some(half(block, 2)), 4) } else { (None, 2) };
                let d = half(block, 0);
                let qh = u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]]);
                for (j, &q) in block[at + 4..at + 20].iter().enumerate() {
                    let low = (q & 0x0f) | ((((qh >> j) << 4) & 0x10) as u8);
                    let high = (q >> 4) | (((qh >> (j + 12)) & 0x10) as u8);
                    match m {
                        Some(m) => {
                            ys[j] = low as f32 * d + m;
                            ys[j + 16] = high as f32 * d + m;
                        }
                        None => {
                            ys[j] = (low as i32 - 16) as f32 * d;
                            ys[j + 16] = (high as i32 - 16) as f32 * d;
                        }
                    }
                }
            }
            GgmlDType::Q8_0 => {
                let d = half(block, 0);
                for (y, &q) in ys.iter_mut().zip(&block[2..34]) {
                    *y = q as i8 as f32 * d;
                }
            }
            GgmlDType::Q4K | GgmlDType::Q5K => {
                // d, dmin, 12 bytes of packed 6-bit scales and minimums,
                // (Q5_K: 32 bytes of fifth bits,) then 128 bytes of nibbles:
                // four 64-value groups, each low nibbles then high nibbles.
                let (d, min) = (half(block, 0), half(block, 2));
                let scales = &block[4..16];
                let (high_bits, nibbles) =
                    if dtype == GgmlDType::Q5K { (Some(&block[16..48]), &block[48..176]) } else { (None, &block[16..144]) };
                for group in 0..4 {
                    let q = &nibbles[group * 32..][..32];
                    let (sc1, m1) = scale_min_k4(2 * group, scales);
                    let (sc2, m2) = scale_min_k4(2 * group + 1, scales);
                    let (d1, m1, d2, m2) = (d * sc1, min * m1, d * sc2, min * m2);
                    let ys = &mut ys[group * 64..][..64];
                    // Adding 0 to a nibble is exact, so Q4_K shares Q5_K's expression bit for bit.
                    let fifth = |l: usize, bit: u8| match high_bits {
                        Some(qh) if qh[l] & (bit << (2 * group)) != 0 => 16.0,
                        _ => 0.0,
                    };
                    for l in 0..32 {
                        ys[l] = d1 * ((q[l] & 0xF) as f32 + fifth(l, 1)) - m1;
                        ys[l + 32] = d2 * ((q[l] >> 4) as f32 + fifth(l, 2)) - m2;
                    }
                }
            }
            GgmlDType::Q6K => {
                // 128 bytes of low nibbles, 64 of 2-bit high parts, 16 i8
                // scales, then d: two 128-value halves, a scale per 16.
                let d = half(block, 208);
                for n in 0..2 {
                    let quants = q6k_half(block, n);
                    let sc = &block[192 + 8 * n..];
                    for (p, y) in ys[128 * n..][..128].iter_mut().enumerate() {
                        *y = d * sc[p / 16] as i8 as f32 * (quants[p] as i8 - 32) as f32;
                    }
                }
            }
            _ => return false,
        }
    }
    true
}

/// The shape of [`affine_row`]'s form of a format whose values are
/// `d × q + m` with a small unsigned `q`: values per scale and bits a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AffineFormat {
    /// 32 for the legacy 4- and 5-bit formats and Q4_K/Q5_K, 16 for Q6_K.
    pub group: usize,
    /// 4, 5 or 6: what the integer kernels' packing reads (two 4-bit values a byte).
    pub bits: u32,
}

/// [`affine_row`]'s form of `dtype`, or `None` for the formats it does not
/// take (Q8_0's 8-bit values do not fit the integer kernel's 7-bit operand,
/// and f32/f16 tensors are not block formats). One list, so the group and
/// the width can never disagree about which formats are covered.
pub fn affine_format(dtype: GgmlDType) -> Option<AffineFormat> {
    let (group, bits) = match dtype {
        GgmlDType::Q4_0 | GgmlDType::Q4_1 | GgmlDType::Q4K => (32, 4),
        GgmlDType::Q5_0 | GgmlDType::Q5_1 | GgmlDType::Q5K => (32, 5),
        GgmlDType::Q6K => (16, 6),
        _ => return None,
    };
    Some(AffineFormat { group, bits })
}

/// Decodes one row into the integer kernel's form: value `i` is
/// `scales[g] × q[i] + mins[g]` with `g = i / affine_format(dtype).group` and
/// `q[i] ≤ 63`. The same numbers as [`row`], regrouped: the 4- and 5-bit
/// formats' offsets (−8, −16, −32 in Q6_K) become minimums, so every `q` is
/// unsigned. Returns false for a format [`affine_format`] does not cover.
pub fn affine_row(dtype: GgmlDType, blocks: &[u8], q: &mut [u8], scales: &mut [f32], mins: &mut [f32]) -> bool {
    let (Some((values, size)), Some(AffineFormat { group, .. })) = (block_shape(dtype), affine_format(dtype)) else { return false };
    debug_assert_eq!(blocks.len(), q.len() / values * size);
    debug_assert_eq!(scales.len(), q.len() / group);
    let per_block = values / group;
    for (((block, qs), ds), ms) in blocks
        .chunks_exact(size)
        .zip(q.chunks_exact_mut(values))
        .zip(scales.chunks_exact_mut(per_block))
        .zip(mins.chunks_exact_mut(per_block))
    {
        match dtype {
            GgmlDType::Q4_0 | GgmlDType::Q4_1 => {
                let d = half(block, 0);
                let (m, at) = if dtype == GgmlDType::Q4_1 { (half(block, 2), 4) } else { (-8.0 * d, 2) };
                for (j, &b) in block[at..at + 16].iter().enumerate() {
                    qs[j] = b & 0x0f;
                    qs[j + 16] = b >> 4;
                }
                (ds[0], ms[0]) = (d, m);
            }
            GgmlDType::Q5_0 | GgmlDType::Q5_1 => {
                let d = half(block, 0);
                let (m, at) = if dtype == GgmlDType::Q5_1 { (half(block, 2), 4) } else { (-16.0 * d, 2) };
                let qh = u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]]);
                for (j, &b) in block[at + 4..at + 20].iter().enumerate() {
                    qs[j] = (b & 0x0f) | ((((qh >> j) << 4) & 0x10) as u8);
                    qs[j + 16] = (b >> 4) | (((qh >> (j + 12)) & 0x10) as u8);
                }
                (ds[0], ms[0]) = (d, m);
            }
            GgmlDType::Q4K | GgmlDType::Q5K => {
                let (d, min) = (half(block, 0), half(block, 2));
                let scale_bytes = &block[4..16];
                let (high_bits, nibbles) =
                    if dtype == GgmlDType::Q5K { (Some(&block[16..48]), &block[48..176]) } else { (None, &block[16..144]) };
                for group in 0..4 {
                    let nib = &nibbles[group * 32..][..32];
                    for half_index in 0..2 {
                        let (sc, m) = scale_min_k4(2 * group + half_index, scale_bytes);
                        let sub = 2 * group + half_index;
                        (ds[sub], ms[sub]) = (d * sc, -(min * m));
                        for l in 0..32 {
                            let low = if half_index == 0 { nib[l] & 0xF } else { nib[l] >> 4 };
                            let fifth = high_bits.map_or(0, |qh| if qh[l] & ((1 + half_index as u8) << (2 * group)) != 0 { 16 } else { 0 });
                            qs[sub * 32 + l] = low + fifth;
                        }
                    }
                }
            }
            GgmlDType::Q6K => {
                let d = half(block, 208);
                for n in 0..2 {
                    qs[128 * n..][..128].copy_from_slice(&q6k_half(block, n));
                    // Sixteen values a scale: value = d·sc·(q − 32).
                    for (g, &s) in block[192 + 8 * n..][..8].iter().enumerate() {
                        let scale = d * s as i8 as f32;
                        (ds[8 * n + g], ms[8 * n + g]) = (scale, -32.0 * scale);
                    }
                }
            }
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::QTensor;
    use candle_core::{Device, Tensor};

    #[test]
    fn rows_decode_to_candles_values_bit_for_bit() {
        let (rows, cols) = (3, 512);
        // Uneven values, so every scale, minimum and fifth/sixth bit varies.
        let values: Vec<f32> = (0..rows * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0 * (1.0 + (i % 7) as f32)).collect();
        let tensor = Tensor::from_vec(values, (rows, cols), &Device::Cpu).unwrap();
        let formats = [
            GgmlDType::Q4_0,
            GgmlDType::Q4_1,
            GgmlDType::Q5_0,
            GgmlDType::Q5_1,
            GgmlDType::Q8_0,
            GgmlDType::Q4K,
            GgmlDType::Q5K,
            GgmlDType::Q6K,
        ];
        for dtype in formats {
            let q = QTensor::quantize(&tensor, dtype).unwrap();
            let want = q.dequantize(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let data = q.data().unwrap();
            let (values, size) = block_shape(dtype).unwrap();
            let row_bytes = cols / values * size;
            for r in 0..rows {
                let mut ours = vec![0f32; cols];
                assert!(row(dtype, &data[r * row_bytes..(r + 1) * row_bytes], &mut ours));
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&ours), bits(&want[r * cols..(r + 1) * cols]), "{dtype:?} row {r}");
            }
        }
        assert!(!row(GgmlDType::F32, &[], &mut []));
    }

    #[test]
    fn affine_rows_are_the_same_values_regrouped() {
        let (rows, cols) = (2, 512);
        let values: Vec<f32> = (0..rows * cols).map(|i| ((i * 53 % 97) as f32 - 48.0) / 13.0 * (1.0 + (i % 5) as f32)).collect();
        let tensor = Tensor::from_vec(values, (rows, cols), &Device::Cpu).unwrap();
        for dtype in [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q5_0, GgmlDType::Q5_1, GgmlDType::Q4K, GgmlDType::Q5K, GgmlDType::Q6K] {
            let q = QTensor::quantize(&tensor, dtype).unwrap();
            let data = q.data().unwrap();
            let (values, size) = block_shape(dtype).unwrap();
            let AffineFormat { group, bits } = affine_format(dtype).unwrap();
            let row_bytes = cols / values * size;
            for r in 0..rows {
                let bytes = &data[r * row_bytes..(r + 1) * row_bytes];
                let mut want = vec![0f32; cols];
                assert!(row(dtype, bytes, &mut want));
                let (mut qs, mut ds, mut ms) = (vec![0u8; cols], vec![0f32; cols / group], vec![0f32; cols / group]);
                assert!(affine_row(dtype, bytes, &mut qs, &mut ds, &mut ms));
                assert!(qs.iter().all(|&q| q < 1 << bits), "{dtype:?}: a value above {bits} bits");
                for (i, w) in want.iter().enumerate() {
                    let ours = ds[i / group] * qs[i] as f32 + ms[i / group];
                    assert!((ours - w).abs() <= 1e-5 * (1.0 + w.abs()), "{dtype:?} row {r} value {i}: {ours} against {w}");
                }
            }
        }
        assert!(affine_format(GgmlDType::Q8_0).is_none());
    }
}
