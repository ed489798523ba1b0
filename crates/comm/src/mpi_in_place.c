/* MPI_IN_PLACE is a macro whose value depends on the MPI library (Open MPI:
 * (void *) 1, MPICH: (void *) -1); this exports it to Rust (src/mpi.rs,
 * module in_place). Compiled by build.rs against the same mpi.h as rsmpi. */
#include <mpi.h>

void *const gradcomp_mpi_in_place = MPI_IN_PLACE;

/* The sum of IEEE half-precision values (MPI has no half type): each
 * element is widened to float, added, and rounded back to half to nearest
 * with ties to even, exactly as half::f16::from_f32(a + b) does in the
 * in-process backend. The data travel as MPI_UINT16_T. */
#include <stdint.h>
#include <string.h>

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while ((man & 0x400u) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint16_t float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) { /* inf or NaN (keep NaN quiet) */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
    }
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 0x1f) {
        return (uint16_t)(sign | 0x7c00u);
    }
    if (e <= 0) {
        if (e < -10) {
            return (uint16_t)sign;
        }
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half_man = man >> shift;
        uint32_t rest = man & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (rest > halfway || (rest == halfway && (half_man & 1u))) {
            half_man++;
        }
        return (uint16_t)(sign | half_man);
    }
    uint32_t half = sign | ((uint32_t)e << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) {
        half++; /* may carry into the exponent, up to infinity: correct */
    }
    return (uint16_t)half;
}

static void f16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) {
        b[i] = float_to_half(half_to_float(a[i]) + half_to_float(b[i]));
    }
}

/* Creates the commutative half-precision sum once (after MPI_Init). */
MPI_Op gradcomp_mpi_f16_sum(void) {
    static MPI_Op op = MPI_OP_NULL;
    if (op == MPI_OP_NULL) {
        MPI_Op_create(f16_sum, 1, &op);
    }
    return op;
}
