// TLS settings of the HTTP port. See tls_context.hpp.
#include "tls_context.hpp"

#include <openssl/err.h>
#include <openssl/x509.h>

#include <fstream>
#include <memory>

namespace tessera::serving {

namespace {

// OpenSSL's queued errors as one line (the most specific last), and the queue emptied.
std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

// No passphrase: a protected key fails to load instead of prompting on the terminal.
int no_passphrase(char*, int, int, void*) { return 0; }

status readable(const char* flag, const std::string& file) {
  if (!std::ifstream(file)) return status::invalid(std::string(flag) + " " + file + ": cannot be read");
  return ok_status();
}

}  // namespace

status configure_tls(SSL_CTX* ctx, const std::string& cert_file, const std::string& key_file) {
  TESSERA_RETURN_IF_ERROR(readable("--tls-cert", cert_file));
  TESSERA_RETURN_IF_ERROR(readable("--tls-key", key_file));
  ERR_clear_error();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                               SSL_OP_CIPHER_SERVER_PREFERENCE);
  if (SSL_CTX_set_cipher_list(ctx, "ECDHE+AESGCM:ECDHE+CHACHA20") != 1)
    return status::internal("TLS 1.2 cipher list rejected: " + openssl_errors());
  SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1)
    return status::invalid("--tls-cert " + cert_file + ": not a usable PEM certificate chain (" +
                           openssl_errors() + ")");
  auto mismatch = [&] {
    return status::invalid("--tls-key " + key_file + " does not belong to the certificate in --tls-cert " +
                           cert_file + " (" + openssl_errors() + ")");
  };
  if (SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) return mismatch();
    return status::invalid("--tls-key " + key_file +
                           ": not a usable unencrypted PEM private key (" + openssl_errors() + ")");
  }
  if (SSL_CTX_check_private_key(ctx) != 1) return mismatch();
  return ok_status();
}

status check_tls_files(const std::string& cert_file, const std::string& key_file) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (!ctx) return status::internal("SSL_CTX_new failed: " + openssl_errors());
  return configure_tls(ctx.get(), cert_file, key_file);
}

}  // namespace tessera::serving
