// The `seal "transit"` of HashiCorp Vault, run as Vault runs it, for the tests of the
// Coordinator's transit engine (tests/coordinator/transit). It is go-kms-wrapping's transit
// wrapper, the code behind Vault's seal stanza, which OpenBao forked for its own: Vault hands it
// the stanza's keys as a config map, SetConfig encrypts a test value (and renews the token if it
// has one), and the seal then encrypts the root key at initialisation and decrypts it at every
// start (auto-unseal).
//
// Input on stdin, one JSON object: {"config": {stanza keys}, "plaintext": base64 or absent,
// "ciphertext": a blob's ciphertext or absent}. Output on stdout, one JSON object: the key id
// after SetConfig, the ciphertext of the plaintext (encrypted, then decrypted again and
// compared), the plaintext of the ciphertext; or {"error": ...} and exit status 1.
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"

	wrapping "github.com/hashicorp/go-kms-wrapping/v2"
	transit "github.com/hashicorp/go-kms-wrapping/wrappers/transit/v2"
)

type input struct {
	Config     map[string]string `json:"config"`
	Plaintext  *string           `json:"plaintext"`
	Ciphertext *string           `json:"ciphertext"`
}

type output struct {
	KeyID      string `json:"key_id,omitempty"`
	Ciphertext string `json:"ciphertext,omitempty"`
	Plaintext  string `json:"plaintext,omitempty"`
	Error      string `json:"error,omitempty"`
}

func main() {
	result, err := run()
	if err != nil {
		result = output{Error: err.Error()}
	}
	_ = json.NewEncoder(os.Stdout).Encode(result)
	if err != nil {
		os.Exit(1)
	}
}

func run() (output, error) {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		return output{}, err
	}
	ctx := context.Background()
	seal := transit.NewWrapper()
	// As Vault's configutil.GetTransitKMSFunc: the stanza as the config map, environment
	// variables not consulted (so the test's environment cannot change the stanza).
	if _, err := seal.SetConfig(ctx, wrapping.WithConfigMap(in.Config), wrapping.WithDisallowEnvVars(true)); err != nil {
		return output{}, err
	}
	defer seal.Finalize(ctx)
	var out output
	keyID, err := seal.KeyId(ctx)
	if err != nil {
		return output{}, err
	}
	out.KeyID = keyID
	if in.Plaintext != nil {
		plaintext, err := base64.StdEncoding.DecodeString(*in.Plaintext)
		if err != nil {
			return output{}, err
		}
		blob, err := seal.Encrypt(ctx, plaintext)
		if err != nil {
			return output{}, err
		}
		again, err := seal.Decrypt(ctx, blob)
		if err != nil {
			return output{}, err
		}
		if !bytes.Equal(again, plaintext) {
			return output{}, errors.New("the decrypted root key differs from the encrypted one")
		}
		out.Ciphertext = string(blob.Ciphertext)
	}
	if in.Ciphertext != nil {
		plaintext, err := seal.Decrypt(ctx, &wrapping.BlobInfo{Ciphertext: []byte(*in.Ciphertext)})
		if err != nil {
			return output{}, err
		}
		out.Plaintext = base64.StdEncoding.EncodeToString(plaintext)
	}
	return out, nil
}
