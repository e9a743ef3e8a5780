//! A sandbox's scoped tokens, minted, listed and revoked with this client's token.

use sandbox_protocol::{MintedToken, TokenList, TokenRequest, TokenRevoked};

use super::{SandboxClient, SandboxError};

impl SandboxClient {
    /// `POST /v1/tokens`: a token with some of this client's scopes, for what it hands on (a
    /// read-only token for a viewer, a command token for an agent). Its secret is in the
    /// answer only.
    pub async fn mint_token(&self, request: &TokenRequest) -> Result<MintedToken, SandboxError> {
        let response = self
            .send(
                self.request(reqwest::Method::POST, "/v1/tokens")
                    .json(request),
            )
            .await?;
        self.json(response).await
    }

    /// `GET /v1/tokens`: the tokens minted and not revoked, without their secrets.
    pub async fn list_tokens(&self) -> Result<TokenList, SandboxError> {
        let response = self
            .send(self.request(reqwest::Method::GET, "/v1/tokens"))
            .await?;
        self.json(response).await
    }

    /// `DELETE /v1/tokens/{id}`: the token is refused from its next request on.
    pub async fn revoke_token(&self, id: &str) -> Result<TokenRevoked, SandboxError> {
        let response = self
            .send(self.request(reqwest::Method::DELETE, &format!("/v1/tokens/{id}")))
            .await?;
        self.json(response).await
    }
}
