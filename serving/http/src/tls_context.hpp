// The HTTP port's TLS settings on an OpenSSL SSL_CTX (Asio's ssl::context wraps one): TLS 1.2
// and 1.3 only, forward-secret AEAD suites for 1.2 (1.3's are all such), no compression, no
// client-started renegotiation, the certificate chain and its key checked to belong together.
// Private to tessera_serving: http_server.cpp serves with it, serve_options.cpp checks the files
// before a host starts its tiles.
#pragma once

#include <openssl/ssl.h>

#include <string>

#include "tessera/common/status.hpp"

namespace tessera::serving {

/// Applies the settings and loads the PEM chain and key. Errors name the flag, the file and
/// OpenSSL's reason. A passphrase-protected key is refused (no prompt on the terminal).
status configure_tls(SSL_CTX* ctx, const std::string& cert_file, const std::string& key_file);

/// configure_tls on a throwaway context: are the files usable?
status check_tls_files(const std::string& cert_file, const std::string& key_file);

}  // namespace tessera::serving
