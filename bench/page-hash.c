// The ways of hashing pages side by side (docs/performance.md, "The portable twin of the sixteen
// lanes" and "granary's own SHA-256"): one page at a time with granary's SHA-256
// (Sources/CSHA256: SHA-NI where the CPU has it, and its portable C), the sixteen lanes' portable
// builds, the AVX-512 lanes. 16 MiB of pages per round, the ways alternated, best of 15 rounds
// each. Not part of make bench; from the repository:
//
//   clang -O2 -ISources/CPageHash/include -ISources/CSHA256/include bench/page-hash.c \
//       Sources/CPageHash/page_hash.c Sources/CSHA256/sha256.c -o /tmp/page-hash && /tmp/page-hash 4096
//
// A way this CPU lacks (SHA-NI, AVX-512) is left out.

#include "granary_page_hash.h"
#include "granary_sha256.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void one(const uint8_t *p, size_t len, uint8_t *d){granary_sha256 c; granary_sha256_init(&c); granary_sha256_update(&c,p,len); granary_sha256_final(&c,d);}
int main(int argc,char**argv){
  size_t len=argc>1?(size_t)atoi(argv[1]):4096, n=(16u<<20)/len; uint8_t *p=malloc(len*n), *d=malloc(32*n);
  for(size_t i=0;i<len*n;i++) p[i]=(uint8_t)(i*7+i/4096);
  double best[5]={1e9,1e9,1e9,1e9,1e9};
  const char*names[5]={"one at a time, SHA-NI","one at a time, portable C","lanes, portable SSE2 build","lanes, portable AVX2 build","lanes, AVX-512 (wide)"};
  int has[5]={granary_sha256_accelerated(),1,1,granary_sha256_x16_portable_builds()>=2,granary_sha256_x16_supported()};
  for(int rep=0;rep<15;rep++) for(int w=0;w<5;w++){
    if(!has[w]) continue;
    double t=now();
    if(w<2){ granary_sha256_force_portable(w==1); for(size_t i=0;i<n;i++) one(p+i*len,len,d+32*i); granary_sha256_force_portable(0); }
    else for(size_t i=0;i<n;i+=16){ if(w==4) granary_sha256_x16(p+i*len,len,d+32*i); else granary_sha256_x16_portable(p+i*len,len,d+32*i,w-1);}
    t=now()-t; if(t<best[w]) best[w]=t;
  }
  int base=has[0]?0:1;
  for(int w=0;w<5;w++) if(has[w]) printf("%-30s %6.3f GB/s  %6.2f us/page  %.2fx %s\n",names[w],len*n/best[w]/1e9,best[w]/n*1e6,best[base]/best[w],names[base]);
}
