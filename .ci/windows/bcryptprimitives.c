/* A stand-in for Windows' bcryptprimitives.dll under Wine 8, which lacks
 * ProcessPrng (Rust's std imports it for its random numbers): the same
 * bytes from RtlGenRandom (advapi32's SystemFunction036). For CI under
 * Wine only; never shipped. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG chunk = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
