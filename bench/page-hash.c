// The four ways of hashing pages side by side (docs/performance.md, "The portable twin of the
// sixteen lanes"): swift-crypto's SHA-256 (its own BoringSSL objects, whose SHA-256 block function
// is assembly: SHA-NI where the CPU has it), the portable lanes' two builds, the AVX-512 lanes.
// 16 MiB of pages per round, the ways alternated, best of 15 rounds each. Not part of make bench;
// after `swift build` (for the BoringSSL objects), from the repository:
//
//   D=$(swift build --show-bin-path)
//   clang -O2 -ISources/CPageHash/include bench/page-hash.c Sources/CPageHash/page_hash.c -c
//   clang++ page-hash.o page_hash.o $(find $D/CCryptoBoringSSL.build -name '*.o') -lpthread \
//       -o /tmp/page-hash && /tmp/page-hash 4096
//
// A way this CPU lacks (AVX-512) is left out.

#include "granary_page_hash.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
extern uint8_t *CCryptoBoringSSL_SHA256(const uint8_t *, size_t, uint8_t *);
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t len=argc>1?(size_t)atoi(argv[1]):4096, n=(16u<<20)/len; uint8_t *p=malloc(len*n), *d=malloc(32*n);
  for(size_t i=0;i<len*n;i++) p[i]=(uint8_t)(i*7+i/4096);
  double best[5]={1e9,1e9,1e9,1e9,1e9}; const char*names[5]={"swift-crypto (BoringSSL, SHA-NI)","portable, baseline build (SSE2)","portable, AVX2 build","wide (AVX-512)",""};
  int ways=granary_sha256_x16_supported()?4:3;
  for(int rep=0;rep<15;rep++) for(int w=0;w<ways;w++){
    double t=now();
    if(w==0) for(size_t i=0;i<n;i++) CCryptoBoringSSL_SHA256(p+i*len,len,d+32*i);
    else for(size_t i=0;i<n;i+=16){ if(w==3) granary_sha256_x16(p+i*len,len,d+32*i); else granary_sha256_x16_portable(p+i*len,len,d+32*i,w<=granary_sha256_x16_portable_builds()?w:1);}
    t=now()-t; if(t<best[w]) best[w]=t;
  }
  for(int w=0;w<ways;w++) printf("%-36s %6.3f GB/s  %6.2f us/page  %.2fx swift-crypto\n",names[w],len*n/best[w]/1e9,best[w]/n*1e6,best[0]/best[w]);
}
