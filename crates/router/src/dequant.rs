//! Row-at-a-time dequantisation of the GGUF block formats small routers ship
//! in (Q4_0, Q4_1, Q8_0), so the browser build can decode each weight row
//! straight into the micro-kernel's packed panels, on every thread, without
//! first building candle's full f32 tensor and copying it twice. The
//! arithmetic is the reference's (ggml's `dequantize_row_*`, as candle
//! implements it): the same f32 values to the bit.

use candle_core::quantized::GgmlDType;

/// Values per block in all three formats.
const BLOCK: usize = 32;

/// Bytes per block, for the formats this module decodes.
pub fn block_bytes(dtype: GgmlDType) -> Option<usize> {
    match dtype {
        GgmlDType::Q4_0 => Some(18),
        GgmlDType::Q4_1 => Some(20),
        GgmlDType::Q8_0 => Some(34),
        _ => None,
    }
}

/// Decodes one row: `blocks` holds `out.len() / 32` blocks of `dtype`.
/// Returns false for a format this module does not decode.
pub fn row(dtype: GgmlDType, blocks: &[u8], out: &mut [f32]) -> bool {
    let Some(size) = block_bytes(dtype) else { return false };
    debug_assert_eq!(blocks.len(), out.len() / BLOCK * size);
    for (block, ys) in blocks.chunks_exact(size).zip(out.chunks_exact_mut(BLOCK)) {
        let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
        match dtype {
            GgmlDType::Q4_0 => {
                for (j, &q) in block[2..18].iter().enumerate() {
                    ys[j] = ((q & 0x0f) as i32 - 8) as f32 * d;
                    ys[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
                }
            }
            GgmlDType::Q4_1 => {
                let m = f16_to_f32(u16::from_le_bytes([block[2], block[3]]));
                for (j, &q) in block[4..20].iter().enumerate() {
                    ys[j] = (q & 0x0f) as f32 * d + m;
                    ys[j + 16] = (q >> 4) as f32 * d + m;
                }
            }
            _ => {
                for (y, &q) in ys.iter_mut().zip(&block[2..34]) {
                    *y = q as i8 as f32 * d;
                }
            }
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
        let (rows, cols) = (3, 96);
        let values: Vec<f32> = (0..rows * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
        let tensor = Tensor::from_vec(values, (rows, cols), &Device::Cpu).unwrap();
        for dtype in [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q8_0] {
            let q = QTensor::quantize(&tensor, dtype).unwrap();
            let want = q.dequantize(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let data = q.data().unwrap();
            let row_bytes = cols / BLOCK * block_bytes(dtype).unwrap();
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
