//! Numeric element and scalar types, scalar values, and the conversions numba-cuda
//! applies when a scalar is passed to a parameter of another type.

/// Every numeric type numba passes to a kernel, as an array element or a scalar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub(crate) enum Scalar {
    Bool = 1,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    F32,
    F64,
    C64,
    C128,
}

pub(crate) const ALL_SCALARS: [Scalar; 14] = [
    Scalar::Bool,
    Scalar::I8,
    Scalar::I16,
    Scalar::I32,
    Scalar::I64,
    Scalar::U8,
    Scalar::U16,
    Scalar::U32,
    Scalar::U64,
    Scalar::F16,
    Scalar::F32,
    Scalar::F64,
    Scalar::C64,
    Scalar::C128,
];

impl Scalar {
    pub(crate) fn from_code(code: u8) -> Option<Scalar> {
        ALL_SCALARS.iter().copied().find(|s| *s as u8 == code)
    }

    /// numba's type name (`numba.cuda.types.<name>`).
    pub(crate) fn numba_name(self) -> &'static str {
        match self {
            Scalar::Bool => "boolean",
            Scalar::I8 => "int8",
            Scalar::I16 => "int16",
            Scalar::I32 => "int32",
            Scalar::I64 => "int64",
            Scalar::U8 => "uint8",
            Scalar::U16 => "uint16",
            Scalar::U32 => "uint32",
            Scalar::U64 => "uint64",
            Scalar::F16 => "float16",
            Scalar::F32 => "float32",
            Scalar::F64 => "float64",
            Scalar::C64 => "complex64",
            Scalar::C128 => "complex128",
        }
    }

    /// NumPy's dtype name (`numpy.dtype(<name>)`).
    pub(crate) fn numpy_name(self) -> &'static str {
        match self {
            Scalar::Bool => "bool",
            other => other.numba_name(),
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Scalar> {
        ALL_SCALARS
            .iter()
            .copied()
            .find(|s| s.numba_name() == name || s.numpy_name() == name)
    }

    pub(crate) fn itemsize(self) -> usize {
        match self {
            Scalar::Bool | Scalar::I8 | Scalar::U8 => 1,
            Scalar::I16 | Scalar::U16 | Scalar::F16 => 2,
            Scalar::I32 | Scalar::U32 | Scalar::F32 => 4,
            Scalar::I64 | Scalar::U64 | Scalar::F64 | Scalar::C64 => 8,
            Scalar::C128 => 16,
        }
    }

    /// The type of an array-interface type string such as `"<f4"` or `"|b1"`.
    /// Big-endian and other non-native kinds are not supported.
    pub(crate) fn from_typestr(typestr: &str) -> Option<Scalar> {
        let bytes = typestr.as_bytes();
        if bytes.len() < 3 || !matches!(bytes[0], b'<' | b'|' | b'=') {
            return None;
        }
        let size: usize = typestr.get(2..)?.parse().ok()?;
        let scalar = match (bytes[1], size) {
            (b'b', 1) => Scalar::Bool,
            (b'i', 1) => Scalar::I8,
            (b'i', 2) => Scalar::I16,
            (b'i', 4) => Scalar::I32,
            (b'i', 8) => Scalar::I64,
            (b'u', 1) => Scalar::U8,
            (b'u', 2) => Scalar::U16,
            (b'u', 4) => Scalar::U32,
            (b'u', 8) => Scalar::U64,
            (b'f', 2) => Scalar::F16,
            (b'f', 4) => Scalar::F32,
            (b'f', 8) => Scalar::F64,
            (b'c', 8) => Scalar::C64,
            (b'c', 16) => Scalar::C128,
            _ => return None,
        };
        Some(scalar)
    }

    /// The type of a DLPack `(code, bits, lanes)` data type.
    pub(crate) fn from_dlpack(code: u8, bits: u8, lanes: u16) -> Option<Scalar> {
        if lanes != 1 {
            return None;
        }
        let scalar = match (code, bits) {
            (0, 8) => Scalar::I8,
            (0, 16) => Scalar::I16,
            (0, 32) => Scalar::I32,
            (0, 64) => Scalar::I64,
            (1, 8) => Scalar::U8,
            (1, 16) => Scalar::U16,
            (1, 32) => Scalar::U32,
            (1, 64) => Scalar::U64,
            (2, 16) => Scalar::F16,
            (2, 32) => Scalar::F32,
            (2, 64) => Scalar::F64,
            (5, 64) => Scalar::C64,
            (5, 128) => Scalar::C128,
            (6, 8) => Scalar::Bool,
            _ => return None,
        };
        Some(scalar)
    }

    pub(crate) fn is_complex(self) -> bool {
        matches!(self, Scalar::C64 | Scalar::C128)
    }
}

/// A scalar argument's value, read once from the Python object.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Value {
    Bool(bool),
    /// Any integer, signed or unsigned 64-bit.
    Int(i128),
    Float(f64),
    /// A float16 kept as its bits, so passing it to a float16 parameter is exact.
    Half(u16),
    Complex(f64, f64),
}

impl Value {
    fn as_f64(self) -> Option<f64> {
        match self {
            Value::Bool(b) => Some(f64::from(u8::from(b))),
            Value::Int(i) => Some(i as f64),
            Value::Float(f) => Some(f),
            Value::Half(bits) => Some(half_to_f64(bits)),
            Value::Complex(..) => None,
        }
    }

    /// The value as numba-cuda passes it to a parameter of type `target`, as the 8-byte
    /// slots of its flattened parameters (two for complex). Integers wrap to the target
    /// width as ctypes does; floats do not convert to integers, nor complex to reals.
    pub(crate) fn convert(self, target: Scalar) -> std::result::Result<[u64; 2], String> {
        self.slots_for(target).ok_or_else(|| self.refusal(target))
    }

    /// [`Value::convert`]'s slots; `None` where it refuses.
    #[inline]
    pub(crate) fn slots_for(self, target: Scalar) -> Option<[u64; 2]> {
        let int = match self {
            Value::Bool(b) => Some(i128::from(b)),
            Value::Int(i) => Some(i),
            _ => None,
        };
        let bits = match target {
            Scalar::Bool => match int {
                Some(i) => u64::from(i != 0),
                None => return None,
            },
            Scalar::I8 | Scalar::U8 => match int {
                Some(i) => u64::from(i as u8),
                None => return None,
            },
            Scalar::I16 | Scalar::U16 => match int {
                Some(i) => u64::from(i as u16),
                None => return None,
            },
            Scalar::I32 | Scalar::U32 => match int {
                Some(i) => u64::from(i as u32),
                None => return None,
            },
            Scalar::I64 | Scalar::U64 => match int {
                Some(i) => i as u64,
                None => return None,
            },
            Scalar::F16 => match self {
                Value::Half(bits) => u64::from(bits),
                _ => match self.as_f64() {
                    Some(f) => u64::from(f64_to_half(f)),
                    None => return None,
                },
            },
            Scalar::F32 => match self.as_f64() {
                Some(f) => u64::from((f as f32).to_bits()),
                None => return None,
            },
            Scalar::F64 => match self.as_f64() {
                Some(f) => f.to_bits(),
                None => return None,
            },
            Scalar::C64 | Scalar::C128 => {
                let (re, im) = match self {
                    Value::Complex(re, im) => (re, im),
                    real => (real.as_f64().unwrap_or(0.0), 0.0),
                };
                return Some(if target == Scalar::C64 {
                    [
                        u64::from((re as f32).to_bits()),
                        u64::from((im as f32).to_bits()),
                    ]
                } else {
                    [re.to_bits(), im.to_bits()]
                });
            }
        };
        Some([bits, 0])
    }

    #[cold]
    fn refusal(self, target: Scalar) -> String {
        format!(
            "cannot pass {} to a parameter of type {}",
            self.kind_name(),
            target.numba_name()
        )
    }

    fn kind_name(self) -> &'static str {
        match self {
            Value::Bool(_) => "a bool",
            Value::Int(_) => "an int",
            Value::Float(_) | Value::Half(_) => "a float",
            Value::Complex(..) => "a complex",
        }
    }
}

/// IEEE half-precision bits to f64 (exact).
pub(crate) fn half_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((bits >> 10) & 0x1f);
    let mantissa = f64::from(bits & 0x3ff);
    match exponent {
        0 => sign * mantissa * 2f64.powi(-24),
        31 if mantissa == 0.0 => sign * f64::INFINITY,
        31 => f64::NAN,
        e => sign * (1.0 + mantissa / 1024.0) * 2f64.powi(e - 15),
    }
}

/// f64 to IEEE half-precision bits, rounding to nearest even (as NumPy does).
pub(crate) fn f64_to_half(value: f64) -> u16 {
    let sign: u16 = if value.is_sign_negative() { 0x8000 } else { 0 };
    let magnitude = value.abs();
    if value.is_nan() {
        // Keep the sign and the top payload bits, as NumPy does; stay a NaN.
        let payload = ((value.to_bits() & 0x000f_ffff_ffff_ffff) >> 42) as u16;
        return sign | 0x7c00 | payload.max(1);
    }
    if magnitude >= 65520.0 {
        return sign | 0x7c00; // rounds to infinity
    }
    if magnitude < 2f64.powi(-14) {
        // Subnormal: units of 2^-24, ties to even.
        let units = round_half_even(magnitude * 2f64.powi(24));
        return sign | units as u16;
    }
    let exponent = magnitude.log2().floor() as i32;
    // Guard against log2 rounding at exact powers of two.
    let exponent = if magnitude < 2f64.powi(exponent) {
        exponent - 1
    } else if magnitude >= 2f64.powi(exponent + 1) {
        exponent + 1
    } else {
        exponent
    };
    let scaled = magnitude / 2f64.powi(exponent) - 1.0; // in [0, 1)
    let mut mantissa = round_half_even(scaled * 1024.0) as u32;
    let mut biased = (exponent + 15) as u32;
    if mantissa == 1024 {
        mantissa = 0;
        biased += 1;
    }
    if biased >= 31 {
        return sign | 0x7c00;
    }
    sign | ((biased as u16) << 10) | mantissa as u16
}

fn round_half_even(x: f64) -> f64 {
    let floor = x.floor();
    let diff = x - floor;
    if diff > 0.5 || (diff == 0.5 && floor % 2.0 != 0.0) {
        floor + 1.0
    } else {
        floor
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typestrs_map_to_scalars() {
        assert_eq!(Scalar::from_typestr("<f4"), Some(Scalar::F32));
        assert_eq!(Scalar::from_typestr("|b1"), Some(Scalar::Bool));
        assert_eq!(Scalar::from_typestr("<c16"), Some(Scalar::C128));
        assert_eq!(Scalar::from_typestr(">f4"), None);
        assert_eq!(Scalar::from_typestr("<V8"), None);
        assert_eq!(Scalar::from_typestr(""), None);
    }

    #[test]
    fn half_round_trips_every_finite_value() {
        for bits in 0u16..=0xffff {
            let exponent = (bits >> 10) & 0x1f;
            if exponent == 31 {
                continue;
            }
            assert_eq!(f64_to_half(half_to_f64(bits)), bits, "bits {bits:#06x}");
        }
    }

    #[test]
    fn half_rounds_to_nearest_even() {
        assert_eq!(f64_to_half(1.0), 0x3c00);
        assert_eq!(f64_to_half(1.0 + 2f64.powi(-11)), 0x3c00); // tie, to even
        assert_eq!(f64_to_half(1.0 + 3.0 * 2f64.powi(-11)), 0x3c02); // tie, to even
        assert_eq!(f64_to_half(70000.0), 0x7c00);
        assert_eq!(f64_to_half(-2.5), 0xc100);
    }

    #[test]
    fn ints_wrap_like_ctypes_and_floats_do_not_become_ints() {
        assert_eq!(Value::Int(300).convert(Scalar::I8).unwrap()[0], 44);
        assert_eq!(Value::Int(-1).convert(Scalar::U32).unwrap()[0], 0xffff_ffff);
        assert!(Value::Float(1.5).convert(Scalar::I32).is_err());
        assert!(Value::Complex(1.0, 2.0).convert(Scalar::F64).is_err());
        assert_eq!(
            Value::Int(3).convert(Scalar::C64).unwrap(),
            [u64::from(3f32.to_bits()), 0]
        );
        assert_eq!(Value::Bool(true).convert(Scalar::Bool).unwrap()[0], 1);
    }
}
