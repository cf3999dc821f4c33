/* Test-harness shim for Wine 8 (Debian bookworm), which lacks bcryptprimitives.dll: Rust's std
 * (1.78+) imports ProcessPrng from it for random numbers. This DLL forwards ProcessPrng to
 * bcrypt's BCryptGenRandom, which Wine implements. Used only to run the Windows tests under Wine
 * (ci/windows.sh installs it into the throw-away Wine prefix); it is no part of any build. */
#include <windows.h>
#include <bcrypt.h>

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG chunk = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (BCryptGenRandom(NULL, data, chunk, BCRYPT_USE_SYSTEM_PREFERRED_RNG) != 0)
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
