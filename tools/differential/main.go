// Command differential runs Google's SEV-SNP and TDX verifiers (go-sev-guest, go-tdx-guest) on
// evidence given on stdin, one JSON object a line, and prints one verdict a line on stdout.
//
// It exists so that Contrast for Python's own verifiers can be compared with Google's on the same
// inputs (tests/attestation/test_differential.py, bench/differential.py). Everything is offline:
// the AMD and Intel roots come from -roots, the VCEK and the Intel collateral from the input, and
// go-tdx-guest's collateral "fetches" are answered from the input by a local getter. No input may
// make either library touch the network; a request for an unknown URL is refused.
//
// Input (one line):
//
//	{"id": "...", "kind": "snp"|"tdx", "now": RFC 3339, "evidence": base64,
//	 "vcek": base64 DER (snp), "collateral": {...} (tdx, optional), "policy": {...}}
//
// Output (one line per input, same order): {"id": "...", "ok": bool, "reason": "..."}.
package main

import (
	"bufio"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	sevabi "github.com/google/go-sev-guest/abi"
	"github.com/google/go-sev-guest/kds"
	spb "github.com/google/go-sev-guest/proto/sevsnp"
	sevvalidate "github.com/google/go-sev-guest/validate"
	sevverify "github.com/google/go-sev-guest/verify"
	sevtrust "github.com/google/go-sev-guest/verify/trust"
	tdxabi "github.com/google/go-tdx-guest/abi"
	tdxvalidate "github.com/google/go-tdx-guest/validate"
	tdxverify "github.com/google/go-tdx-guest/verify"
	"github.com/google/logger"
)

type tcbParts struct {
	Bl    uint8 `json:"bl"`
	Tee   uint8 `json:"tee"`
	Snp   uint8 `json:"snp"`
	Ucode uint8 `json:"ucode"`
}

// policy is the part of a reference value both sides check; see differential.py for how our
// SnpReferenceValues / TdxReferenceValues are built from the same fields.
type policy struct {
	// SNP
	Measurement    []byte    `json:"measurement"`
	MinTcb         *tcbParts `json:"min_tcb"`
	AllowDebug     bool      `json:"allow_debug"`
	AllowSmt       bool      `json:"allow_smt"`
	AllowMigrateMA bool      `json:"allow_migrate_ma"`
	AllowCxl       bool      `json:"allow_cxl"`
	Vmpl           *int      `json:"vmpl"`
	Product        string    `json:"product"`
	// TDX
	MrTd         []byte `json:"mr_td"`
	TdAttributes []byte `json:"td_attributes"`
}

type collateral struct {
	TcbInfo         []byte `json:"tcb_info"`
	QeIdentity      []byte `json:"qe_identity"`
	TcbSigningChain []byte `json:"tcb_signing_chain"`
	PckCrl          []byte `json:"pck_crl"`
	RootCaCrl       []byte `json:"root_ca_crl"`
}

type input struct {
	ID         string      `json:"id"`
	Kind       string      `json:"kind"`
	Now        time.Time   `json:"now"`
	Evidence   []byte      `json:"evidence"`
	Vcek       []byte      `json:"vcek"`
	Collateral *collateral `json:"collateral"`
	Policy     policy      `json:"policy"`
}

type verdict struct {
	ID     string `json:"id"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason"`
}

type roots struct {
	amd            map[string][]*sevtrust.AMDRootCerts
	intel          *x509.CertPool
	pckCrlChainPEM []byte
}

func readPEM(path string) ([]*x509.Certificate, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var out []*x509.Certificate
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %v", path, err)
		}
		out = append(out, cert)
	}
	if len(out) == 0 {
		return nil, nil, fmt.Errorf("%s: no certificate", path)
	}
	return out, data, nil
}

func loadRoots(dir string) (*roots, error) {
	r := &roots{amd: map[string][]*sevtrust.AMDRootCerts{}}
	for _, line := range []string{"Milan", "Genoa", "Turin"} {
		base := filepath.Join(dir, "amd", strings.ToLower(line))
		certs := &sevtrust.ProductCerts{}
		for _, name := range []string{"ark", "ask", "asvk"} {
			parsed, _, err := readPEM(filepath.Join(base, name+".pem"))
			if err != nil {
				return nil, err
			}
			switch name {
			case "ark":
				certs.Ark = parsed[0]
			case "ask":
				certs.Ask = parsed[0]
			case "asvk":
				certs.Asvk = parsed[0]
			}
		}
		root := sevtrust.AMDRootCertsProduct(line)
		root.ProductCerts = certs
		r.amd[line] = []*sevtrust.AMDRootCerts{root}
	}
	intel, _, err := readPEM(filepath.Join(dir, "intel", "sgx_root_ca.pem"))
	if err != nil {
		return nil, err
	}
	r.intel = x509.NewCertPool()
	r.intel.AddCert(intel[0])
	_, r.pckCrlChainPEM, err = readPEM(filepath.Join(dir, "intel", "pck_platform_ca_chain.pem"))
	if err != nil {
		return nil, err
	}
	return r, nil
}

// noNetwork refuses every fetch: go-sev-guest must work from what it was given.
type noNetwork struct{}

func (noNetwork) Get(u string) ([]byte, error) {
	return nil, fmt.Errorf("offline: refused to fetch %s", u)
}

// localPCS answers go-tdx-guest's Intel PCS requests from the input's collateral.
type localPCS struct {
	c              *collateral
	pckCrlChainPEM []byte
}

func issuerChain(pemBytes []byte) []string {
	return []string{url.QueryEscape(strings.TrimSpace(string(pemBytes)) + "\n")}
}

func (g localPCS) Get(u string) (map[string][]string, []byte, error) {
	answer := func(header string, chain []byte, body []byte) (map[string][]string, []byte, error) {
		if len(body) == 0 {
			return nil, nil, fmt.Errorf("offline: the input has no document for %s", u)
		}
		if header == "" {
			return map[string][]string{}, body, nil
		}
		return map[string][]string{header: issuerChain(chain)}, body, nil
	}
	switch {
	case strings.Contains(u, "/tcb?fmspc="):
		return answer("Tcb-Info-Issuer-Chain", g.c.TcbSigningChain, g.c.TcbInfo)
	case strings.Contains(u, "/qe/identity"):
		return answer("Sgx-Enclave-Identity-Issuer-Chain", g.c.TcbSigningChain, g.c.QeIdentity)
	case strings.Contains(u, "/pckcrl?"):
		return answer("Sgx-Pck-Crl-Issuer-Chain", g.pckCrlChainPEM, g.c.PckCrl)
	case strings.HasPrefix(u, "https://certificates.trustedservices.intel.com/"):
		return answer("", nil, g.c.RootCaCrl)
	}
	return nil, nil, fmt.Errorf("offline: refused to fetch %s", u)
}

var products = map[string]spb.SevProduct_SevProductName{
	"Milan": spb.SevProduct_SEV_PRODUCT_MILAN,
	"Genoa": spb.SevProduct_SEV_PRODUCT_GENOA,
	"Turin": spb.SevProduct_SEV_PRODUCT_TURIN,
}

func verifySnp(in *input, r *roots) error {
	report, err := sevabi.ReportToProto(in.Evidence)
	if err != nil {
		return fmt.Errorf("parse: %v", err)
	}
	attestation := &spb.Attestation{
		Report: report,
		CertificateChain: &spb.CertificateChain{
			VcekCert: in.Vcek,
			VlekCert: in.Vcek,
			Extras:   map[string][]byte{},
		},
	}
	options := &sevverify.Options{
		DisableCertFetching: true,
		Getter:              noNetwork{},
		Now:                 in.Now,
		TrustedRoots:        r.amd,
	}
	if in.Policy.Product != "" {
		name, ok := products[in.Policy.Product]
		if !ok {
			return fmt.Errorf("unknown product %q", in.Policy.Product)
		}
		options.Product = &spb.SevProduct{Name: name}
	}
	if err := sevverify.SnpAttestation(attestation, options); err != nil {
		return fmt.Errorf("verify: %v", err)
	}
	p := in.Policy
	vopts := &sevvalidate.Options{
		GuestPolicy: sevabi.SnpPolicy{
			Debug:      p.AllowDebug,
			SMT:        p.AllowSmt,
			MigrateMA:  p.AllowMigrateMA,
			CXLAllowed: p.AllowCxl,
		},
		Measurement: p.Measurement,
		VMPL:        p.Vmpl,
		// Ours holds REPORTED, CURRENT and LAUNCH TCB to the minimum and does not compare
		// COMMITTED with CURRENT; permitting provisional firmware is the closest setting.
		PermitProvisionalFirmware: true,
	}
	if p.MinTcb != nil {
		parts := kds.TCBParts{BlSpl: p.MinTcb.Bl, TeeSpl: p.MinTcb.Tee, SnpSpl: p.MinTcb.Snp, UcodeSpl: p.MinTcb.Ucode}
		vopts.MinimumTCB = parts
		vopts.MinimumLaunchTCB = parts
	}
	if err := sevvalidate.SnpAttestation(attestation, vopts); err != nil {
		return fmt.Errorf("validate: %v", err)
	}
	return nil
}

func verifyTdx(in *input, r *roots) error {
	quote, err := tdxabi.QuoteToProto(in.Evidence)
	if err != nil {
		return fmt.Errorf("parse: %v", err)
	}
	options := &tdxverify.Options{Now: in.Now, TrustedRoots: r.intel}
	if in.Collateral != nil {
		options.GetCollateral = true
		// Ours checks the CRLs it is given and does not require them; go-tdx-guest checks
		// revocation only when told to, and then needs both.
		options.CheckRevocations = len(in.Collateral.PckCrl) > 0 && len(in.Collateral.RootCaCrl) > 0
		options.Getter = localPCS{c: in.Collateral, pckCrlChainPEM: r.pckCrlChainPEM}
	} else {
		options.Getter = localPCS{c: &collateral{}}
	}
	if err := tdxverify.TdxQuote(quote, options); err != nil {
		return fmt.Errorf("verify: %v", err)
	}
	vopts := &tdxvalidate.Options{TdQuoteBodyOptions: tdxvalidate.TdQuoteBodyOptions{
		MrTd:         in.Policy.MrTd,
		TdAttributes: in.Policy.TdAttributes,
	}}
	if err := tdxvalidate.TdxQuote(quote, vopts); err != nil {
		return fmt.Errorf("validate: %v", err)
	}
	return nil
}

func run(in *input, r *roots) (err error) {
	defer func() {
		if recovered := recover(); recovered != nil {
			err = fmt.Errorf("panic: %v", recovered)
		}
	}()
	switch in.Kind {
	case "snp":
		return verifySnp(in, r)
	case "tdx":
		return verifyTdx(in, r)
	}
	return fmt.Errorf("unknown kind %q", in.Kind)
}

func main() {
	rootsDir := flag.String("roots", "", "the attestation test data's roots/ directory (amd/, intel/)")
	flag.Parse()
	// go-tdx-guest logs to stdout by default, which would interleave with the verdicts.
	logger.Init("differential", false, false, io.Discard)
	if *rootsDir == "" {
		fmt.Fprintln(os.Stderr, "differential: -roots is required")
		os.Exit(2)
	}
	r, err := loadRoots(*rootsDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "differential:", err)
		os.Exit(2)
	}
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	encoder := json.NewEncoder(out)
	for scanner.Scan() {
		var in input
		result := verdict{}
		if err := json.Unmarshal(scanner.Bytes(), &in); err != nil {
			result.Reason = fmt.Sprintf("input: %v", err)
		} else if err := run(&in, r); err != nil {
			result.Reason = err.Error()
		} else {
			result.OK = true
		}
		result.ID = in.ID
		if err := encoder.Encode(result); err != nil {
			fmt.Fprintln(os.Stderr, "differential:", err)
			os.Exit(1)
		}
		// Flushed per line so that a caller can feed and read in lock step.
		if err := out.Flush(); err != nil {
			fmt.Fprintln(os.Stderr, "differential:", err)
			os.Exit(1)
		}
	}
	if err := scanner.Err(); err != nil && !errors.Is(err, io.EOF) {
		fmt.Fprintln(os.Stderr, "differential:", err)
		os.Exit(1)
	}
}
