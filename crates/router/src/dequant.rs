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

fn half(bytes: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([bytes[at], bytes[at + 1]]))
}

/// A k-quant's 6-bit scale and minimum number `j` (ggml's `get_scale_min_k4`).
fn scale_min_k4(j: usize, q: &[u8]) -> (f32, f32) {
    let (d, m) =
        if j < 4 { (q[j] & 63, q[j + 4] & 63) } else { ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)) };
    (d as f32, m as f32)
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
                // scales, then d: two 128-value halves.
                let d = half(block, 208);
                for n in 0..2 {
                    let ql = &block[64 * n..];
                    let qh = &block[128 + 32 * n..];
                    let sc = &block[192 + 8 * n..];
                    let ys = &mut ys[128 * n..][..128];
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
                        let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                        ys[l] = d * sc[is] as i8 as f32 * q1 as f32;
                        ys[l + 32] = d * sc[is + 2] as i8 as f32 * q2 as f32;
                        ys[l + 64] = d * sc[is + 4] as i8 as f32 * q3 as f32;
                        ys[l + 96] = d * sc[is + 6] as i8 as f32 * q4 as f32;
                    }
                }
            }
            _ => return false,
        }
    }
    true
}

/// IEEE half to single precision, exactly (subnormals, infinities, NaN).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exponent = ((h >> 10) & 0x1f) as u32;
    let mantissa = (h & 0x3ff) as u32;
    let bits = match (exponent, mantissa) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal half: value = mantissa × 2^-24, normal in f32.
            let value = mantissa as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -value } else { value };
        }
        (0x1f, _) => sign | 0x7f80_0000 | (mantissa << 13),
        _ => sign | ((exponent + 112) << 23) | (mantissa << 13),
    };
    f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::QTensor;
    use candle_core::{Device, Tensor};

    #[test]
    fn half_precision_matches_the_half_crate_semantics_on_every_value() {
        // Spot values with known f32 images.
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0001), 5.960_464_5e-8);
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert!(f16_to_f32(0x7c00).is_infinite() && f16_to_f32(0x7e00).is_nan());
    }

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
}
